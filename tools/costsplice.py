"""Put some suites of a fresh cost table onto a shipped table's scale.

    python tools/costsplice.py SHIPPED FRESH --suites a,b,c [--out PATH]

SHIPPED and FRESH are `mlagate costs` tables. The named suites are taken from FRESH, their
medians multiplied by the median ratio SHIPPED / FRESH over the suite-and-module medians both
tables hold for the other suites; every other suite stays as SHIPPED has it. For a fresh run
made on another machine or under load (docs/times.md, Shards and costs): the ratios inside the
fresh run hold, its absolute seconds do not. Prints the factor and how many medians gave it;
writes the table (with `source` naming both runs) to --out, else to stdout. Exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def scale(shipped: dict, fresh: dict, suites: list[str]) -> tuple[float, int]:
    """The median ratio shipped / fresh over the (suite, module) medians both hold, the named
    suites left out; and how many there were."""
    ratios = [
        shipped["suites"][s]["modules"][m] / v
        for s, entry in fresh["suites"].items()
        if s not in suites and s in shipped["suites"]
        for m, v in entry["modules"].items()
        if v > 0 and m in shipped["suites"][s]["modules"]
    ]
    if not ratios:
        raise ValueError("the tables share no suite-and-module median outside the named suites")
    return statistics.median(ratios), len(ratios)


def splice(shipped: dict, fresh: dict, suites: list[str]) -> tuple[dict, float, int]:
    missing = [s for s in suites if s not in fresh["suites"]]
    if missing:
        raise ValueError(f"the fresh table has no suite {missing[0]}")
    factor, count = scale(shipped, fresh, suites)
    out = {**shipped, "suites": dict(shipped["suites"])}
    for s in suites:
        entry = fresh["suites"][s]
        out["suites"][s] = {
            "default": round(entry["default"] * factor, 3),
            "modules": {m: round(v * factor, 3) for m, v in entry["modules"].items()},
        }
    out["suites"] = dict(sorted(out["suites"].items()))
    out["source"] = (
        f"{shipped['source']}; {', '.join(suites)} from {fresh['source']}, times {factor:.2f} "
        f"(the median ratio of the {count} suite-and-module medians both hold)"
    )
    return out, factor, count


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shipped")
    p.add_argument("fresh")
    p.add_argument("--suites", required=True, help="comma-separated suites taken from FRESH")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    try:
        tables = []
        for path in (args.shipped, args.fresh):
            with open(path, encoding="utf-8") as fh:
                tables.append(json.load(fh))
        out, factor, count = splice(*tables, [s for s in args.suites.split(",") if s])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"costsplice: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(out, indent=1) + "\n"
    print(f"scale {factor:.3f} from {count} medians", file=sys.stderr)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
