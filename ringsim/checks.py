"""Argument checks shared by every public entry point.

Every failure is a ``ValueError`` whose message names the argument and the value, so a user
who passes ``hosts=0`` reads ``hosts must be a positive integer, got 0`` and not a traceback
from deep inside NumPy.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence

import numpy as np

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def check_positive_int(name: str, value: object, *, at_most: int | None = None) -> int:
    """Return ``value`` as an int if it is a positive integer (bools and floats are refused),
    and at most ``at_most`` when given (a size whose arrays could not exist)."""
    if type(value) is int and value > 0 and at_most is None:  # the common case, no ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {_show(value)}")
    if at_most is not None and value > at_most:
        raise ValueError(f"{name} must be at most {at_most:,}, got {value:,}")
    return int(value)


def check_non_negative_int(name: str, value: object) -> int:
    """Return ``value`` as an int if it is an integer >= 0 (a seed; bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {_show(value)}")
    return int(value)


def check_real(
    name: str, value: object, *, positive: bool = False, non_negative: bool = False
) -> float:
    """Return ``value`` as a finite float (bools, strings, NaN and infinities refused), and
    above zero (``positive``) or at least zero (``non_negative``) when asked."""
    if type(value) is float and math.isfinite(value) and value > 0:  # the common case
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float64
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and number <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    if non_negative and number < 0:
        raise ValueError(f"{name} must be at least 0, got {value!r}")
    return number


def check_choice(name: str, value: object, choices: Sequence[str], *, also: str = "") -> str:
    """Return ``value`` if it is one of the strings ``choices`` (``also``: what else the
    caller accepts, for the message), else a ``ValueError`` listing them. Anything but a string
    (a list, an array) is refused the same way rather than compared."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}{also}, got {_show(value)}")
    return value


def check_instance(name: str, value: object, kind: type | tuple[type, ...], what: str) -> object:
    """Return ``value`` if it is a ``kind``, else a ``ValueError``: ``{name} must be {what}``
    (e.g. ``hardware must be a Hardware (ringsim.get_hardware(...))``)."""
    if not isinstance(value, kind):
        raise ValueError(f"{name} must be {what}, got {_show(value)}")
    return value


def check_entry(name: str, value: object, kind: type, registry: dict[str, object]) -> object:
    """``value`` as a ``kind`` (a frozen dataclass): one as is, the name of an entry of
    ``registry``, or a dict of its fields (as a JSON file writes it); else a ``ValueError``
    naming ``name`` and what it may be."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        return registry[check_choice(name, value, tuple(registry), also=" or an object")]
    if isinstance(value, dict):
        unknown = set(value) - set(kind.__dataclass_fields__)
        if unknown:
            raise ValueError(f"{name} has unknown keys {sorted(unknown)}")
        try:
            return kind(**value)
        except TypeError as err:
            raise ValueError(f"{name}: {err}") from None
    raise ValueError(f"{name} must be a name or an object of its fields, got {_show(value)}")


def check_callback(name: str, value: object) -> object:
    """Return ``value`` if it is ``None`` or callable (a ``progress`` callback), else a
    ``ValueError`` naming ``name``."""
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be a function or None, got {_show(value)}")
    return value


def check_memory(name: str, value: int, nbytes: float, what: str) -> None:
    """Refuse up front a size whose arrays (``nbytes``: ``what``) exceed this machine's
    physical memory: a ``ValueError`` naming ``name=value`` and the memory it would need,
    instead of a ``MemoryError`` (or NumPy's "maximum allowed size exceeded") after work."""
    have = physical_memory()
    if nbytes > have:
        raise ValueError(
            f"{name}={value:,} needs {nbytes / 2**30:,.1f} GiB for {what}, more than this "
            f"machine's {have / 2**30:,.1f} GiB of memory"
        )


def physical_memory() -> int:
    """The memory this process may use, in bytes: the machine's physical memory (a generous
    2^40 where the OS does not say), or less where the process's address space is capped
    (``RLIMIT_AS``: a run refused up front rather than a ``MemoryError`` half-way)."""
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        have = 2**40
    try:
        import resource

        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return have
    return have if cap in (resource.RLIM_INFINITY, -1) or cap <= 0 else min(have, cap)


def _show(value: object) -> str:
    """A value as a message shows it: short, and an array by its dtype and shape."""
    if isinstance(value, np.ndarray):
        return f"an array of dtype {value.dtype} and shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (or a NumPy bool); ``"false"``, ``0`` or ``None`` are
    refused: ``bool("false")`` is ``True``, so a string flag would silently mean its opposite."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {_show(value)}")
    return bool(value)


def check_overflow(
    name: str, x: np.ndarray, dtype: object = np.float64, *, lse: np.ndarray | None = None
) -> None:
    """Refuse a non-finite result computed from finite inputs: the arithmetic overflowed.
    ``lse``: the rows' log-sum-exp; in self-attention every query sees at least itself, so a
    ``-inf`` there can only mean that all of its scores overflowed (the row would silently come
    out as 0 under a mask)."""
    if not np.all(np.isfinite(x)) or (lse is not None and not np.all(np.isfinite(lse))):
        hint = "" if np.dtype(dtype) == np.float64 else "use float64 inputs or "
        raise ValueError(
            f"{name} overflowed in {np.dtype(dtype).name}: the scores q.k*scale (or the values) "
            f"are too large to represent; {hint}rescale them"
        )


def checked_result(
    name: str, x: np.ndarray, dtype: object, *, lse: np.ndarray | None = None
) -> np.ndarray:
    """``x``, computed in its working precision, returned as the caller's ``dtype``: refused
    (``check_overflow``) when it overflowed there, and when it does not fit ``dtype`` (a
    float16 gradient beyond 65504 would silently become ``inf``). Every public attention
    function, forward and backward, ends here, so all dtypes are checked alike."""
    check_overflow(name, x, x.dtype, lse=lse)
    with np.errstate(over="ignore"):
        out = x.astype(dtype)
    if not np.all(np.isfinite(out)):
        largest = float(np.abs(x).max())
        raise ValueError(
            f"{name} overflowed in {np.dtype(dtype).name}: |{name}| reaches {largest:.3g}, past "
            f"{np.dtype(dtype).name}'s largest {float(np.finfo(dtype).max):.3g}; use float32 "
            "inputs or rescale them"
        )
    return out


def check_finite_array(name: str, x: np.ndarray) -> None:
    """Refuse NaN or inf up front: attention would silently turn them into NaN outputs."""
    if not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x))[0]
        raise ValueError(
            f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)}: "
            f"{x[tuple(bad)]!r}); attention of non-finite inputs is undefined"
        )


def as_float_array(name: str, x: object) -> np.ndarray:
    """Convert to a floating ndarray of at least two dimensions ``(..., seq, dim)``."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:  # a ragged list
        raise ValueError(
            f"{name} must be an array (..., seq, dim), got {_show(x)}: {err}"
        ) from None
    if arr.dtype.kind not in "f" or arr.dtype.type not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} must be a float16, float32 or float64 array, got dtype {arr.dtype}"
        )
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (..., seq, dim), got shape {arr.shape}")
    if 0 in arr.shape:  # zero heads (or batch) would divide by zero in the GQA grouping
        raise ValueError(
            f"{name} must have no empty axis (batch, heads, seq, dim), got shape {arr.shape}"
        )
    return arr


def check_qkv(
    q: object, k: object, v: object, *, finite: bool = True, names: Sequence[str] = "qkv"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate the shapes of an attention call.

    ``q``: ``(..., Hq, Nq, d)``; ``k``, ``v``: ``(..., Hkv, Nk, d)`` with ``Hq`` a multiple of
    ``Hkv`` (grouped-query attention). Leading batch dims must match exactly. Two-dimensional
    arrays ``(N, d)`` have no head axis. ``names``: the caller's names for the three arguments
    (``q_block``, ...), for the messages about each alone.
    """
    q = as_float_array(names[0], q)
    k = as_float_array(names[1], k)
    v = as_float_array(names[2], v)
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(
            f"q, k and v must share a dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k={k.shape}, v={v.shape}")
    if q.ndim != k.ndim:
        raise ValueError(f"q and k must have the same number of dims, got q={q.shape}, k={k.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim, got q={q.shape}, k={k.shape}")
    if q.shape[:-3] != k.shape[:-3]:
        raise ValueError(f"q and k must share leading batch dims, got q={q.shape}, k={k.shape}")
    if q.ndim >= 3:
        hq, hkv = q.shape[-3], k.shape[-3]
        if hq % hkv != 0:
            raise ValueError(
                f"query heads must be a multiple of key/value heads (GQA), got q heads={hq}, "
                f"kv heads={hkv}"
            )
    if finite:
        for name, arr in zip(names, (q, k, v), strict=True):
            check_finite_array(name, arr)
    return q, k, v


def check_scale(scale: float | None, head_dim: int, *, default: bool = True) -> float:
    """Default to 1/sqrt(d) (where ``default``: else ``None`` is refused too); refuse
    non-finite or zero scales."""
    if scale is None and default:
        return 1.0 / float(np.sqrt(head_dim))
    scale = check_real("scale", scale)
    if scale == 0:
        raise ValueError(f"scale must be finite and non-zero, got {scale!r}")
    return scale


def check_segment_ids(segment_ids: object, seq_len: int) -> np.ndarray | None:
    """Segment (document) ids: one integer per token, shape ``(seq,)``."""
    if segment_ids is None:
        return None
    try:
        seg = np.asarray(segment_ids)
    except (TypeError, ValueError):
        seg = np.asarray(None)
    if seg.dtype.kind not in "iu":
        raise ValueError(f"segment_ids must be integers, got dtype {seg.dtype}")
    if seg.shape != (seq_len,):
        raise ValueError(
            f"segment_ids must have shape ({seq_len},) (one id per token), got {seg.shape}"
        )
    return seg.astype(np.int64)
