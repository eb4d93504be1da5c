"""The git store: `git+URL[#BRANCH]` (file://, https://, ssh; default branch mlagate-results),
the folder layout on a branch whose root holds mlagate-store.json. Real git by subprocess:
it is what every runner already has, with its credentials and proxies, and the one tool that
does partial fetches (a library such as dulwich or pygit2 would bring its own transport and
auth and neither fetches with a filter as git does).

A run fetches the branch's tip with no blobs (`--depth=1 --filter=blob:none`: commits and
trees, never the whole store), lists the entries its plan's keys name, fetches those blobs
only, and reads them with one `git cat-file --batch`. publish() writes this process's new
entries in one commit on the tip (`git fast-import`, no work tree), pushes it, and on a
rejected push fetches the new tip and builds the commit again on it (entries are files of
their own: two writers never conflict), a bounded number of times."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field

from mlagate.store import entries
from mlagate.store.entries import StoreError
from mlagate.store.folder import Published

DEFAULT_BRANCH = "mlagate-results"
TRIES = 6  # pushes before publish gives up (each rejected one: fetch, rebuild, back off)
TIMEOUT = 300  # seconds for one git command (a fetch of a large store included)
REJECTED = ("[rejected]", "non-fast-forward", "fetch first", "cannot lock ref", "stale info")


def parse_spec(spec: str) -> tuple[str, str]:
    """git+URL[#BRANCH]: (URL, BRANCH)."""
    url, _, branch = spec.removeprefix("git+").partition("#")
    branch = branch or DEFAULT_BRANCH
    ok = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{branch}"], capture_output=True, timeout=30
    )
    if not url or ok.returncode != 0 or branch.startswith("-"):
        raise StoreError(f"{spec}: expected git+URL[#BRANCH] (a branch name after #)")
    return url, branch


def _env() -> dict:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    return env


@dataclass
class GitStore:
    spec: str
    url: str
    branch: str
    repo: str  # the local bare repository (a temporary folder, removed at exit)
    write: bool = True
    tip: str | None = None  # the branch's commit as last fetched; None: no branch yet
    present: dict[str, str] = field(default_factory=dict)  # key: blob of the tip's entry
    raw: dict[str, bytes] = field(default_factory=dict)  # key: entry bytes fetched
    pending: dict[str, bytes] = field(default_factory=dict)  # key: new entry to publish
    refused: set[str] = field(default_factory=set)  # keys whose tip entry was refused
    ignored: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, spec: str, *, write: bool) -> GitStore:
        url, branch = parse_spec(spec)
        repo = tempfile.mkdtemp(prefix="mlagate-store-")
        store = cls(spec, url, branch, repo, write)
        weakref.finalize(store, shutil.rmtree, repo, True)
        store.git("init", "-q", "--bare")
        for k, v in (
            ("remote.origin.url", url),
            ("remote.origin.promisor", "true"),
            ("remote.origin.partialclonefilter", "blob:none"),
            ("fetch.negotiationAlgorithm", "noop"),
        ):
            store.git("config", k, v)
        store.refresh()
        return store

    @property
    def label(self) -> str:
        return self.spec

    def git(self, *args: str, data: bytes | None = None, check: bool = True):
        try:
            proc = subprocess.run(
                ["git", "--git-dir", self.repo, *args],
                input=data,
                capture_output=True,
                timeout=TIMEOUT,
                env=_env(),
            )
        except subprocess.TimeoutExpired:
            raise StoreError(f"{self.spec}: git {args[0]} took over {TIMEOUT} s") from None
        except OSError as exc:
            raise StoreError(f"{self.spec}: cannot run git: {exc.strerror or exc}") from None
        if check and proc.returncode != 0:
            raise StoreError(f"{self.spec}: git {args[0]}: {_last_line(proc.stderr)}")
        return proc

    def refresh(self) -> None:
        """Fetch the branch's tip (commits and trees only) and list its entries."""
        heads = self.git("ls-remote", "--heads", "origin", f"refs/heads/{self.branch}", check=False)
        if heads.returncode != 0:
            raise StoreError(f"{self.spec}: cannot reach the remote: {_last_line(heads.stderr)}")
        if not heads.stdout.strip():
            self.tip, self.present = None, {}
            return
        ref = f"refs/remotes/origin/{self.branch}"
        self.git(
            "fetch", "-q", "--no-tags", "--depth=1", "--filter=blob:none",
            "origin", f"+refs/heads/{self.branch}:{ref}",
        )  # fmt: skip
        self.tip = self.git("rev-parse", ref).stdout.decode().strip()
        root = self.git("ls-tree", self.tip, "--", entries.MARKER).stdout
        if not root.strip():
            raise StoreError(
                f"{self.spec}: branch {self.branch} is not a mlagate store "
                f"(no {entries.MARKER} at its root)"
            )
        listing = self.git("ls-tree", "-r", "--full-tree", self.tip, "--", "results/").stdout
        self.present = {}
        for line in listing.decode("utf-8", "replace").splitlines():
            meta, _, path = line.partition("\t")
            name = path.rpartition("/")[2].removesuffix(".json")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob" and entries.KEY_NAME.fullmatch(name):
                self.present[name] = parts[2]

    def prefetch(self, keys) -> None:
        """Fetch, in one request, the entries of these keys (`Key`s or digests) the store has."""
        wanted = [getattr(k, "digest", k) for k in keys]
        self._fetch([k for k in wanted if k in self.present and k not in self.raw])

    def _fetch(self, wanted: list[str]) -> None:
        if not wanted:
            return
        oids = "".join(f"{self.present[k]}\n" for k in wanted).encode()
        self.git(
            "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no",
            "--filter=blob:none", "--stdin", "origin", data=oids,
        )  # fmt: skip
        out = self.git("cat-file", "--batch", data=oids).stdout
        at = 0
        for key in wanted:
            header_end = out.index(b"\n", at)
            header = out[at:header_end].split()
            if len(header) != 3:  # "<oid> missing"
                at = header_end + 1
                continue
            size = int(header[2])
            self.raw[key] = out[header_end + 1 : header_end + 1 + size]
            at = header_end + 1 + size + 1

    def where(self, key: str) -> str:
        return f"{self.spec}:{entries.entry_path(key)}"

    def get(self, key) -> dict | None:
        digest = key.digest
        if digest in self.present and digest not in self.raw:
            self.prefetch([digest])
        raw = self.raw.get(digest)
        if raw is None:
            return None
        entry, why = entries.check(raw, self.where(digest), digest)
        if why:
            self.refused.add(digest)
            line = f"mlagate: reuse: {self.where(digest)}: ignored: {why}"
            self.ignored.append(line)
            print(line, file=sys.stderr)
        return entry

    def put(self, key, doc: dict, commit: str | None) -> str | None:
        """Keep a decisive result for publish(); None when not decisive or read-only."""
        entry = entries.make(key, doc, commit) if self.write else None
        if entry is None:
            return None
        self.pending[key.digest] = entries.encode(entry)
        return self.where(key.digest)

    def put_raw(self, key: str, raw: bytes) -> None:
        """An entry already made (mlagate store push), kept for publish()."""
        self.pending[key] = raw

    def _calibration(self, machine_class: str) -> tuple[str, bytes | None]:
        path = entries.calibration_path(machine_class)
        if self.tip is None:
            return path, None
        found = self.git("ls-tree", self.tip, "--", path).stdout.split()
        if len(found) < 3:
            return path, None
        oid = found[2].decode()
        self.git("fetch", "-q", "--no-tags", "--no-write-fetch-head", "--stdin", "origin",
                 data=f"{oid}\n".encode())  # fmt: skip
        return path, self.git("cat-file", "blob", oid).stdout

    def get_calibration(self, machine_class: str) -> dict | None:
        path, raw = self._calibration(machine_class)
        where = f"{self.spec}:{path}"
        return None if raw is None else entries.check_calibration(raw, where, machine_class)

    def put_calibration(self, machine_class: str, doc: dict) -> None:
        """Publish one calibration document for a machine class (its own commit, now)."""
        path = entries.calibration_path(machine_class)
        raw = (json.dumps(doc, indent=1) + "\n").encode("utf-8")
        entries.check_calibration(raw, f"calibration of {machine_class}", machine_class)
        if not self.write:
            raise StoreError(f"{self.spec}: opened read-only: no calibration stored")
        self._push({path: raw}, f"mlagate: calibration of {machine_class}", replace=True)

    def publish(self) -> Published:
        """This process's new entries in one commit on the branch (fetch, rebuild and retry on
        a rejected push, TRIES times at most)."""
        if not self.pending or not self.write:
            return Published(self.spec)
        files = {entries.entry_path(k): raw for k, raw in self.pending.items()}
        done = self._push(files, f"mlagate: {len(files)} results")
        self.raw.update(self.pending)
        self.pending = {}
        return done

    def remove(self, keys) -> Published:
        """One commit deleting these keys' entries from the tip (mlagate store prune); the
        history keeps them until the branch is rewritten, runners never fetch it."""
        if not self.write:
            raise StoreError(f"{self.spec}: opened read-only: nothing removed")
        gone = {entries.entry_path(k): None for k in keys if k in self.present}
        return self._push(gone, f"mlagate: prune {len(gone)} results", replace=True)

    def _push(self, files: dict, message: str, replace: bool = False) -> Published:
        for attempt in range(1, TRIES + 1):
            if attempt > 1:
                time.sleep(random.uniform(0.1, 0.4) * 2 ** (attempt - 2))
                self.refresh()
            keep = {  # append-only: an entry already on the tip stays, unless it was refused
                p: raw
                for p, raw in files.items()
                if replace or _key(p) not in self.present or _key(p) in self.refused
            }
            if not keep:
                return Published(self.spec, 0, 0, attempt, self.tip)
            commit = self._commit(keep, message)
            proc = self.git("push", "-q", "--porcelain", "origin",
                            f"{commit}:refs/heads/{self.branch}", check=False)  # fmt: skip
            if proc.returncode == 0:
                self.tip = commit
                for p, raw in keep.items():
                    if p.startswith("results/") and raw is None:
                        self.present.pop(_key(p), None)
                    elif p.startswith("results/"):
                        self.present[_key(p)] = ""
                return Published(self.spec, len(keep), 1, attempt, commit[:12])
            said = (proc.stdout + proc.stderr).decode("utf-8", "replace")
            if not any(r in said for r in REJECTED):
                raise StoreError(f"{self.spec}: git push: {_last_line(proc.stderr)}")
        raise StoreError(f"{self.spec}: push still rejected after {TRIES} tries (busy remote)")

    def _commit(self, files: dict, message: str) -> str:
        """A commit of files on the tip (or the store's first commit), by git fast-import."""
        now, msg = int(time.time()), message.encode()
        ref = "refs/mlagate/publish"
        out = [b"commit " + ref.encode(), f"committer mlagate <mlagate@localhost> {now} +0000"]
        out += [f"data {len(msg)}".encode(), msg]
        if self.tip is not None:
            out.append(f"from {self.tip}".encode())
        else:
            files = {entries.MARKER: entries.encode(entries.MARKER_DOC), **files}
        for path, raw in sorted(files.items()):
            if raw is None:
                out.append(f"D {path}".encode())
            else:
                out += [f"M 100644 inline {path}".encode(), f"data {len(raw)}".encode(), raw]
        out.append(b"done")
        text = b"\n".join(_str(x) for x in out) + b"\n"
        self.git("fast-import", "--quiet", "--force", "--done", data=text)
        return self.git("rev-parse", ref).stdout.decode().strip()

    def iter_raw(self):
        """Every entry of the tip: (key, where, bytes), all fetched (mlagate store's verbs)."""
        self._fetch([k for k in self.present if k not in self.raw])
        for key in sorted(self.present):
            yield key, self.where(key), self.raw.get(key, b"")


def _str(x) -> bytes:
    return x if isinstance(x, bytes) else x.encode()


def _key(path: str) -> str:
    return path.rpartition("/")[2].removesuffix(".json")


def _last_line(err: bytes) -> str:
    lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "failed"
