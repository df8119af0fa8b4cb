//! The record walk: where each intact TFRecord of a buffer starts and ends,
//! both CRCs checked, or the first fault. Mirrors `complete_records` in
//! `transforms/tfrecord/damage.py` (the reference), which keeps the error
//! messages: this module only says which fault, where.

/// Bytes before a record's data: u64 length, u32 masked CRC of the length.
pub const HEADER_SIZE: usize = 12;
/// Bytes after it: u32 masked CRC of the data.
pub const FOOTER_SIZE: usize = 4;
/// The longest record accepted (a serialized protobuf's 2 GiB cap), as
/// `framing.MAX_RECORD_BYTES`.
pub const MAX_RECORD_BYTES: u64 = (1 << 31) - 1;
const MASK_DELTA: u32 = 0xA282_EAD8;

/// What stopped a walk before the end of the complete records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The header's CRC does not match its length field.
    BadLengthCrc,
    /// The length field is above `MAX_RECORD_BYTES` (the length given).
    TooLong(u64),
    /// The data's CRC does not match the footer.
    BadDataCrc,
}

/// The intact complete records at the head of a buffer, and the fault (with
/// the byte offset of the faulty record's header and the number of intact
/// records before it) that stopped the walk, if any.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Walk {
    pub starts: Vec<usize>,
    pub ends: Vec<usize>,
    pub fault: Option<(Fault, usize)>,
}

/// The CRC32C of `data`, masked the way TFRecord files store it.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    ((crc >> 15) | (crc << 17)).wrapping_add(MASK_DELTA)
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes);
    u32::from_le_bytes(word)
}

fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// Walks `buffer` from its start record by record. A record whose body is
/// not all in the buffer yet ends the walk without a fault (the reader
/// reads on); every length is checked against the buffer before it is
/// used, so a crafted length field can neither read out of bounds nor
/// size an allocation.
pub fn walk_records(buffer: &[u8]) -> Walk {
    let mut walk = Walk::default();
    let mut cursor = 0usize;
    while buffer.len() - cursor >= HEADER_SIZE {
        let header = &buffer[cursor..cursor + HEADER_SIZE];
        let length = le_u64(&header[..8]);
        if le_u32(&header[8..]) != masked_crc32c(&header[..8]) {
            walk.fault = Some((Fault::BadLengthCrc, cursor));
            break;
        }
        if length > MAX_RECORD_BYTES {
            walk.fault = Some((Fault::TooLong(length), cursor));
            break;
        }
        // length <= 2**31 - 1, so this cannot overflow a 64-bit usize.
        let record_bytes = HEADER_SIZE + length as usize + FOOTER_SIZE;
        if buffer.len() - cursor < record_bytes {
            break;
        }
        let end = cursor + record_bytes;
        let data = &buffer[cursor + HEADER_SIZE..end - FOOTER_SIZE];
        if le_u32(&buffer[end - FOOTER_SIZE..end]) != masked_crc32c(data) {
            walk.fault = Some((Fault::BadDataCrc, cursor));
            break;
        }
        walk.starts.push(cursor);
        walk.ends.push(end);
        cursor = end;
    }
    walk
}

/// Appends `record` framed as a TFRecord to `out` (`framing.frame_records`).
pub fn frame_into(out: &mut Vec<u8>, record: &[u8]) {
    let start = out.len();
    out.resize(start + HEADER_SIZE + record.len() + FOOTER_SIZE, 0);
    frame_at(&mut out[start..], record);
}

/// Writes `record` framed as a TFRecord at the start of `out`, which must
/// hold at least its framed size; returns that size.
pub fn frame_at(out: &mut [u8], record: &[u8]) -> usize {
    let length = (record.len() as u64).to_le_bytes();
    let end = HEADER_SIZE + record.len();
    out[..8].copy_from_slice(&length);
    out[8..HEADER_SIZE].copy_from_slice(&masked_crc32c(&length).to_le_bytes());
    out[HEADER_SIZE..end].copy_from_slice(record);
    out[end..end + FOOTER_SIZE].copy_from_slice(&masked_crc32c(record).to_le_bytes());
    end + FOOTER_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for record in records {
            frame_into(&mut out, record);
        }
        out
    }

    #[test]
    fn masked_crc_of_empty_matches_tensorflow() {
        // TensorFlow's masked CRC32C of b"" (crc32c(b"") == 0).
        assert_eq!(masked_crc32c(b""), 0xA282_EAD8);
    }

    #[test]
    fn a_length_above_the_cap_is_a_fault_not_an_allocation() {
        let length = (u64::MAX).to_le_bytes();
        let mut buffer = length.to_vec();
        buffer.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
        let walk = walk_records(&buffer);
        assert_eq!(walk.fault, Some((Fault::TooLong(u64::MAX), 0)));
    }

    proptest! {
        #[test]
        fn intact_records_walk_to_their_end(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..64), 0..16)) {
            let buffer = framed(&records);
            let walk = walk_records(&buffer);
            prop_assert_eq!(walk.fault, None);
            prop_assert_eq!(walk.starts.len(), records.len());
            for ((start, end), record) in walk.starts.iter().zip(&walk.ends).zip(&records) {
                prop_assert_eq!(&buffer[start + HEADER_SIZE..end - FOOTER_SIZE], &record[..]);
            }
        }

        #[test]
        fn any_bytes_walk_without_panic(buffer in prop::collection::vec(any::<u8>(), 0..256),
                                        cut in 0usize..256) {
            let walk = walk_records(&buffer[..cut.min(buffer.len())]);
            for (start, end) in walk.starts.iter().zip(&walk.ends) {
                prop_assert!(start < end && *end <= buffer.len());
            }
        }

        #[test]
        fn a_flipped_byte_is_found_in_its_record(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..32), 1..8), at in any::<prop::sample::Index>(),
                bit in 0u8..8) {
            let mut buffer = framed(&records);
            let position = at.index(buffer.len());
            buffer[position] ^= 1 << bit;
            let walk = walk_records(&buffer);
            let intact = walk.ends.last().copied().unwrap_or(0);
            prop_assert!(intact <= position);
            prop_assert!(walk.fault.is_some() || walk.ends.len() < records.len());
        }
    }
}
