"""A real model's GGUF file in parts, for a GPU machine that takes at most so much per call.

The device calls of this project carry at most 64 MiB each, with the wheelhouse; the
SmolLM2 GGUF of `harness ppl --model smollm2` is 93.8 MiB. Split it here, where the model
package is installed, carry one part per call of one warm machine, join the parts there
(checked against the file's SHA-256 in ``harness.model.real.MODELS``), and point
``HARNESS_MODEL_DIR`` at the folder (docs/perplexity.md §7):

    python scripts/gguf_parts.py split smollm2 --out .gguf-parts --parts 2
    # device call 1 (carry .gguf-parts/part-0 and .whl):
    mkdir -p /tmp/gguf && cp .gguf-parts/part-0 /tmp/gguf/
    # device call 2 (carry .gguf-parts/part-1 and .whl), same warm machine:
    python3 scripts/gguf_parts.py join smollm2 /tmp/gguf/part-0 .gguf-parts/part-1 --out /tmp/model
    HARNESS_MODEL_DIR=/tmp/model python3 -m harness ppl --model smollm2 --max-tokens 32768

Exit 0 on success; 2 with one line when a part is missing or the joined file's digest is
not the model's.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from harness.model.real import MODELS, gguf_path


def split(model: str, out: Path, parts: int) -> list[Path]:
    """Cut the installed GGUF of ``model`` into ``parts`` files ``out/part-<i>``."""
    data = gguf_path(model).read_bytes()
    out.mkdir(parents=True, exist_ok=True)
    size = -(-len(data) // parts)
    written = []
    for i in range(parts):
        path = out / f"part-{i}"
        path.write_bytes(data[i * size:(i + 1) * size])
        written.append(path)
    return written


def join(model: str, parts: list[Path], out: Path) -> Path:
    """Concatenate ``parts`` into ``out/<the model's file>``; raise ValueError (one line)
    when a part is missing or the result is not the model's file."""
    spec = MODELS[model]
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise ValueError(f"missing part(s): {', '.join(missing)}")
    data = b"".join(p.read_bytes() for p in parts)
    digest = hashlib.sha256(data).hexdigest()
    if spec.sha256 and digest != spec.sha256:
        raise ValueError(f"the joined file's sha256 is {digest[:16]}..., {model}'s is "
                         f"{spec.sha256[:16]}... (parts in the wrong order, or one cut short?)")
    out.mkdir(parents=True, exist_ok=True)
    target = out / spec.file
    target.write_bytes(data)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="cut the installed model's GGUF into parts")
    s.add_argument("model", choices=sorted(MODELS))
    s.add_argument("--out", type=Path, default=Path(".gguf-parts"))
    s.add_argument("--parts", type=int, default=2)
    j = sub.add_parser("join", help="join parts (in order) into the model's file")
    j.add_argument("model", choices=sorted(MODELS))
    j.add_argument("parts", nargs="+", type=Path)
    j.add_argument("--out", type=Path, required=True, help="the folder for HARNESS_MODEL_DIR")
    args = p.parse_args(argv)
    try:
        if args.cmd == "split":
            if args.parts < 1:
                raise ValueError(f"--parts must be >= 1, got {args.parts}")
            for path in split(args.model, args.out, args.parts):
                print(f"{path} {path.stat().st_size} bytes")
        else:
            print(f"{join(args.model, args.parts, args.out)}: sha256 checked")
    except (ValueError, OSError) as exc:
        print(f"gguf_parts: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
