"""The two commands that lint nothing: ``shapelint calibrate`` (measure the local GPU
into a profile for ``--gpu-profile``) and ``shapelint clean`` (delete the result cache)."""

from __future__ import annotations

from collections.abc import Sequence

from shapelint.app.parser import calibrate_parser, clean_parser
from shapelint.errors import ShapelintError


def calibrate(argv: Sequence[str]) -> int:
    """``shapelint calibrate``: write the local CUDA GPU's profile."""
    args = calibrate_parser().parse_args(argv)
    from shapelint.measure import calibrate as measure

    hw = measure.run(args.output)
    print(f"wrote {args.output}: {hw.name}, bf16 {hw.peak_tflops('bf16'):.0f} TFLOP/s, "
          f"{hw.bandwidth / 1e12:.2f} TB/s (use it with --gpu-profile {args.output})")
    return 0


def clean(argv: Sequence[str]) -> int:
    """``shapelint clean``: delete the cache folder, only if shapelint made it, and in
    it only the files shapelint wrote (what else it holds stays, and is named)."""
    args = clean_parser().parse_args(argv)
    from shapelint.app import cache, cached, project
    from shapelint.app.config import load_config

    cfg = load_config(args.config)
    folder, named_by = cached.folder(args.cache_dir, cfg)
    why = cache.forbidden(folder, project.root(cfg))
    if why:
        raise ShapelintError(f"{named_by} {folder}: {why}; nothing removed")
    if not folder.exists() and not folder.is_symlink():
        print(f"no cache at {folder}")
        return 0
    if not cache.is_cache(folder):
        raise ShapelintError(f"{folder}: not a shapelint cache (no CACHEDIR.TAG of shapelint's); nothing removed")
    stays = cache.Store(folder).clear()
    if not stays:
        print(f"removed {folder}")
        return 0
    shown = ", ".join(str(p) for p in stays[:3]) + (f" and {len(stays) - 3} more" if len(stays) > 3 else "")
    print(f"removed shapelint's files from {folder}; kept what shapelint did not make: {shown}")
    return 0


__all__ = ["calibrate", "clean"]
