//! A feature's checked values in a batch, as the table kernels hand them
//! to the statistics: every row's value and, once some row holds none,
//! each row's state.

use crate::rules::{Rule, Value};

/// A row's value in a `Column`: the checked value (or a default that
/// stood in), none (an optional feature left out), or one the kernel did
/// not check (the row was declined at this feature: the Python row path
/// converts it). The byte values are what Python reads (`CheckedValues`).
pub const PRESENT: u8 = 1;
pub const OMITTED: u8 = 0;
pub const UNCHECKED: u8 = 2;

/// One feature's checked values in a batch, for the statistics (and the
/// keys and labels of a column whose every row holds one): every row's
/// value, with a placeholder of the rule's type where a row holds none,
/// and each row's state (`PRESENT`, ...), left empty while every row is
/// PRESENT (the common case: no byte per row to make or hand over).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Column<'a> {
    pub values: Vec<Value<'a>>,
    pub states: Vec<u8>,
}

impl<'a> Column<'a> {
    pub fn with_capacity(rows: usize) -> Self {
        Column { values: Vec::with_capacity(rows), states: Vec::new() }
    }

    /// Every row's value, when every row holds its checked value.
    pub fn complete(&self) -> Option<&[Value<'a>]> {
        self.states.is_empty().then_some(&self.values[..])
    }

    pub(crate) fn push(&mut self, value: Value<'a>) {
        self.values.push(value);
        if !self.states.is_empty() {
            self.states.push(PRESENT);
        }
    }

    /// A row without a checked value: `state` OMITTED or UNCHECKED.
    pub(crate) fn push_none(&mut self, rule: &Rule, state: u8) {
        if self.states.is_empty() {
            self.states.reserve(self.values.capacity());
            self.states.resize(self.values.len(), PRESENT);
        }
        self.values.push(rule.placeholder());
        self.states.push(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_column_holds_every_row_and_its_state(states in prop::collection::vec(
                prop::sample::select(vec![PRESENT, OMITTED, UNCHECKED]), 0..40)) {
            let rule = Rule::Int { lo: i64::MIN, hi: i64::MAX, allowed: None };
            let mut column = Column::with_capacity(states.len());
            for (row, state) in states.iter().enumerate() {
                match *state {
                    PRESENT => column.push(Value::Int(row as i64 + 1)),
                    state => column.push_none(&rule, state),
                }
            }
            let every = states.iter().all(|state| *state == PRESENT);
            prop_assert_eq!(column.complete().is_some(), every);
            prop_assert_eq!(column.values.len(), states.len());
            if !every {
                prop_assert_eq!(&column.states, &states);
            }
            for (row, value) in column.values.iter().enumerate() {
                let expected = if states[row] == PRESENT { row as i64 + 1 } else { 0 };
                prop_assert_eq!(*value, Value::Int(expected));
            }
        }
    }
}
