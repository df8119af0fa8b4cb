"""A module whose body runs at its first use, safely when threads race to it.

`importlib.util.LazyLoader` on CPython before 3.12.3 turns its lazy module
into a plain one *before* running the module's body (CPython gh-114763): a
second thread that imports or uses the module meanwhile gets the half-run
module, and ``AttributeError`` for any name not defined yet. The console
build defers httplib2 and requests this way (`beam_import`), and libraries
such as google-auth import them from whatever thread first needs them.

`LazyLoader` is the standard library's where it holds a lock while the
body runs (3.12.3 on) and otherwise the same loader with that lock: the
first thread to use the module runs its body, every other thread waits for
it, and the running thread itself sees the module as it fills (its body
may use its own names).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types

__all__ = ["LazyLoader"]


class _LazyModule(types.ModuleType):
    """A module not run yet: the first attribute lookup runs it."""

    def __getattribute__(self, attr):
        spec = object.__getattribute__(self, "__spec__")
        state = spec.loader_state
        with state["lock"]:
            # The first thread here runs the body; the others wait above, then
            # find the class reset and look the name up as in any module.
            if object.__getattribute__(self, "__class__") is _LazyModule:
                plain = state["__class__"]
                if state["is_loading"]:  # the running body's own lookups
                    return plain.__getattribute__(self, attr)
                state["is_loading"] = True
                namespace = plain.__getattribute__(self, "__dict__")
                # What was set on the module before it ran is set again after,
                # as it would be had the module been run when imported.
                before = state["__dict__"]
                set_since = {key: value for key, value in namespace.items()
                             if key not in before or before[key] is not value}
                spec.loader.exec_module(self)
                if sys.modules.get(spec.name, self) is not self:
                    raise ValueError(f"module object for {spec.name!r} substituted in "
                                     "sys.modules during a lazy load")
                namespace.update(set_since)
                if isinstance(self, _LazyModule):  # unless its body set a class of its own
                    object.__setattr__(self, "__class__", plain)
        return getattr(self, attr)

    def __delattr__(self, attr):
        self.__getattribute__(attr)  # runs the module; raises for a name it lacks
        delattr(self, attr)


class _LockedLazyLoader(importlib.util.LazyLoader):
    """`importlib.util.LazyLoader` whose module runs under a lock."""

    def exec_module(self, module):
        module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        module.__spec__.loader_state = {"__dict__": module.__dict__.copy(),
                                        "__class__": module.__class__,
                                        "lock": threading.RLock(), "is_loading": False}
        module.__class__ = _LazyModule


LazyLoader = (importlib.util.LazyLoader if sys.version_info >= (3, 12, 3)
              else _LockedLazyLoader)
