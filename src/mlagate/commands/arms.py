"""`mlagate arms`: materialise, list, export, import and verify the arms of the matrix."""

from __future__ import annotations

from pathlib import Path

from mlagate.arm import armidentity, packs
from mlagate.arm import arms as arms_mod
from mlagate.commands import args as cargs
from mlagate.gate import run as execute
from mlagate.matrix import load
from mlagate.paths import default_path
from mlagate.plan import Selection


def add_parser(sub) -> None:
    p = sub.add_parser("arms", help="materialise and check the arms")
    cargs.common(p)
    p.add_argument("--arm", action="append", default=[], help="only this arm (repeatable)")
    p.add_argument(
        "--export", type=Path, default=None, help="pack the materialised arms into this .tar.gz"
    )
    p.add_argument(
        "--import",
        dest="import_",
        type=Path,
        default=None,
        help="unpack an exported arm cache first",
    )
    p.add_argument(
        "--keys",
        action="store_true",
        help="only print each arm's cache key, installing nothing (the arms runners/cleanup.sh "
        "keeps)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="check each installed arm against its content manifest, installing nothing; exit 1 "
        "when one changed",
    )


def _derived(arm, folder) -> None:
    """What the arm key re-derives from the matrix (the source and the patches' bytes) must be
    what the installed arm's arm.json records; PackError naming the first difference."""
    record = packs.arm_record(folder)
    source = armidentity.source_record(arm)
    patches = armidentity.patches(arm)
    if record.get("source") != source:
        raise packs.PackError(f"arm {folder.name}: arm.json records another source than {source}")
    if [p.get("sha256") for p in record.get("patches") or [] if isinstance(p, dict)] != patches:
        raise packs.PackError(f"arm {folder.name}: arm.json records other patches than the matrix")


def verify(matrix, args) -> int:
    """One line per arm of the matrix: ok, not installed, or what changed."""
    Selection(arms=tuple(args.arm)).check(matrix)
    root = args.cache or arms_mod.cache_root()
    changed = 0
    for arm in matrix.arms.values():
        if args.arm and arm.id not in args.arm:
            continue
        folder = root / "arms" / arms_mod.arm_key(arm)
        if not (folder / "arm.json").is_file():
            print(f"{arm.id:28} not installed")
            continue
        try:
            packs.verify(folder)
            _derived(arm, folder)
            print(f"{arm.id:28} ok  {folder}")
        except packs.PackError as exc:
            changed += 1
            print(f"{arm.id:28} CHANGED  {exc}")
    return 1 if changed else 0


def main(args) -> int:
    if args.import_:
        keys = arms_mod.import_cache(args.import_, args.cache)
        print(f"imported {len(keys)} arms from {args.import_}")
    matrix = load(args.matrix or default_path())
    if args.verify:
        return verify(matrix, args)
    if args.keys:
        Selection(arms=tuple(args.arm)).check(matrix)
        for arm in matrix.arms.values():
            if not args.arm or arm.id in args.arm:
                print(arms_mod.arm_key(arm))
        return 0
    installs = execute.installs_for(matrix, Selection(arms=tuple(args.arm)), args.cache)
    for inst in installs.values():
        print(
            f"{inst.arm.id:28} {inst.arm.role:8} {inst.runtime.distribution} {inst.version:10} "
            f"{inst.key}  {inst.site}"
        )
    if args.export:
        arms_mod.export(installs, args.export)
        print(f"exported {len(installs)} arms to {args.export}")
    return 0
