"""Beam's look-up of a DoFn method's parameters, made once per function.

Beam asks every DoFn, about eight times per ParDo, which state and timer
parameters its methods declare (`userstate.get_dofn_specs`: twice as the
ParDo is made, three times in `Pipeline.to_runner_api`, three times as the
runner's bundle processor sets the stage up). Each time it walks every
method of the DoFn, Beam's own base-class methods included (29 on a
`beam.Map`'s), and takes each one's `inspect.signature` through
`core.get_function_args_defaults`: ~6,500 signatures for the 26 ParDos of a
small build, ~0.07 s of the ~0.22 CPU-s a 50-row build spends once Beam
is imported.

The answer for a bound method depends on its function alone:
`inspect.signature` of a method bound to any object is the signature of
its ``__func__`` without the first parameter. `memoize_method_signatures`
makes Beam's function keep that answer per function (weakly, so a
function's entry goes with it) and hand each caller new lists, as before;
anything else (a plain function, a callable object, a builtin) is looked
up each time, as Beam does. Only the console script's `build` and the
local build's workers (`sdk_worker`) install it, as they import Beam
lean: a caller's own process keeps Beam as it is.
"""

from __future__ import annotations

import types
import weakref
from typing import Any, Callable

__all__ = ["memoize_method_signatures"]

_ArgsDefaults = tuple[list[str], list[Any]]


def memoize_method_signatures() -> None:
    """Replaces `apache_beam.transforms.core.get_function_args_defaults`
    (what `core.get_function_arguments` calls, for every DoFn method Beam
    inspects) by `per_function(it)`; once per process."""
    from apache_beam.transforms import core

    if not getattr(core.get_function_args_defaults, "memoized_per_function", False):
        core.get_function_args_defaults = per_function(core.get_function_args_defaults)


def per_function(look_up: Callable[[Any], _ArgsDefaults]) -> Callable[[Any], _ArgsDefaults]:
    """`look_up` (callable -> (argument names, defaults)) answered from a
    memo for a bound method of a plain function, keyed by that function."""
    memo: "weakref.WeakKeyDictionary[types.FunctionType, _ArgsDefaults]" = (
        weakref.WeakKeyDictionary())

    def args_defaults(f: Any) -> _ArgsDefaults:
        if not (isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType)):
            return look_up(f)
        known = memo.get(f.__func__)
        if known is None:
            known = memo[f.__func__] = look_up(f)
        args, defaults = known
        return list(args), list(defaults)  # the caller's own lists, as from `look_up`

    args_defaults.memoized_per_function = True  # type: ignore[attr-defined]
    return args_defaults
