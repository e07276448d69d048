"""Tests for sesame.py, in the order of its sections (one helper set at the top). Each test name says
what a user would see.

Inputs are small literal sessions written here; when ../shared/samples exists the real sessions
there are indexed too. Run: python3 -m pytest -q
"""
import base64
import collections
import datetime
import errno
import functools
import glob
import hashlib
import io
import itertools
import json
import zlib
import os
import pathlib
import random
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
import sys
import threading
import time

import pytest

import sesame
from sesame import PARSERS, NotASessionFile, ParseReport, norm_time

HERE = os.path.dirname(os.path.abspath(__file__))
# The longest tests (fuzzing, kill -9, concurrency, the relevance set, every sample): skipped with
# SESAME_QUICK=1 for a quick loop while editing; CI runs everything.
slow = pytest.mark.skipif(bool(os.environ.get("SESAME_QUICK")), reason="slow test (SESAME_QUICK is set)")
SAMPLES = os.path.join(HERE, "..", "shared", "samples")


# ==================================================================================================
# Helpers: write pi sessions, run the CLI in-process
# ==================================================================================================

def line(obj):
    return json.dumps(obj) + "\n"


class PiWriter:
    """Builds a pi v3 session file entry by entry, the way pi writes them."""

    def __init__(self, root, sid, cwd="/home/dev/proj", start="2026-03-10T09:00:00.000Z", version=3):
        self.sid, self.cwd, self.n = sid, cwd, 0
        folder = os.path.join(str(root), "--" + cwd.strip("/").replace("/", "-") + "--")
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, start.replace(":", "-").replace(".", "-") + "_" + sid + ".jsonl")
        self.minute = int(start[14:16])
        self.day = start[:14]
        header = {"type": "session", "id": sid, "timestamp": start, "cwd": cwd}
        if version != 1:
            header["version"] = version
        self.lines = [header]
        self.version = version

    def ts(self):
        self.n += 1
        return "%s%02d:%02d.000Z" % (self.day, self.minute, self.n % 60)

    def entry(self, etype, **kw):
        e = {"type": etype, "timestamp": self.ts()}
        if "message" in kw and "timestamp" not in kw["message"]:
            kw["message"]["timestamp"] = int(sesame.parse_time(e["timestamp"]).timestamp() * 1000)
        if self.version != 1:
            e["id"] = "%08x" % self.n
            e["parentId"] = "%08x" % (self.n - 1) if self.n > 1 else None
        e.update(kw)
        self.lines.append(e)
        return self

    def user(self, text):
        return self.entry("message", message={"role": "user", "content": [{"type": "text", "text": text}]})

    def assistant(self, text=None, thinking=None, calls=()):
        content = []
        if thinking:
            content.append({"type": "thinking", "thinking": thinking})
        if text:
            content.append({"type": "text", "text": text})
        for cid, name, args in calls:
            content.append({"type": "toolCall", "id": cid, "name": name, "arguments": args})
        return self.entry("message", message={"role": "assistant", "content": content, "stopReason": "stop"})

    def result(self, cid, name, text, is_error=False):
        return self.entry("message", message={"role": "toolResult", "toolCallId": cid, "toolName": name,
                                              "content": [{"type": "text", "text": text}], "isError": is_error})

    def tool(self, name, args, output):
        cid = "call_%d" % self.n
        self.assistant(calls=[(cid, name, args)])
        return self.result(cid, name, output)

    def save(self, extra=""):
        with open(self.path, "w") as f:
            for e in self.lines:
                f.write(line(e))
            f.write(extra)
        return self.path


@pytest.fixture
def env(tmp_path, monkeypatch):
    """An isolated HOME, data and config dir; returns the pi sessions root (configured)."""
    bare_home(tmp_path, monkeypatch)
    monkeypatch.setenv("NO_COLOR", "1")
    root = tmp_path / "pi-sessions"
    root.mkdir()
    write_config({"sources": [{"parser": "pi", "path": str(root)}]}, tmp_path)
    return root


def bare_home(tmp_path, monkeypatch):
    """An isolated HOME (tmp_path/home, returned), data and config dir, and no config: Sesame looks
    for the agents where they keep their files, as for a new user."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SESAME_CONFIG_DIR", str(tmp_path / "config"))
    return home


def write_config(cfg, tmp_path, text=None):
    os.makedirs(tmp_path / "config", exist_ok=True)
    with open(tmp_path / "config" / "config.jsonc", "w") as f:
        f.write(text if text is not None else json.dumps(cfg))


def run(capsys, *argv):
    """Run sesame in-process: (exit code, stdout, stderr)."""
    code = sesame.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def search_ids(capsys, *argv):
    """The session ids a search finds, in order (all of the page: no output budget unless given)."""
    budget = () if "--max-chars" in argv else ("--max-chars", "0")
    code, out, err = run(capsys, "search", *argv, "--json", *budget)
    assert code == 0, err
    return [r["sessionId"] for r in json.loads(out)["results"]]


# Agent fixtures: write a session file, parse it with one parser, look at its chunks.

def write_file(path, content):
    """Write text (or a JSON-able object as JSON) to path, making its folders; returns the path."""
    path = pathlib.Path(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def write_jsonl(path, records, raw_tail=""):
    """One JSON record per line (a str record is written as it is), then raw_tail; returns the path
    as a string (what parsers take and report)."""
    return str(write_file(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records) + raw_tail))


def parse_file(agent, path):
    return PARSERS[agent].parse(str(path), ParseReport())


def kinds(s):
    return [c.kind for c in s.chunks]


def texts(s, kind):
    return [c.text for c in s.chunks if c.kind == kind]


def sample_sessions(folder, agent=None):
    """Every file of ../shared/samples/<folder> through one parser (the folder's name unless given):
    each parses to sessions with an id and ISO UTC times in order, or is refused as not its format.
    Skips when the samples are absent."""
    root = os.path.join(SAMPLES, folder)
    if not os.path.isdir(root):
        pytest.skip("no samples for %s" % folder)
    found = []
    for f in sorted(p for p in glob.glob(os.path.join(root, "**", "*"), recursive=True) if os.path.isfile(p)):
        try:
            sessions = PARSERS[agent or folder].parse(f, ParseReport())
        except NotASessionFile:
            continue
        assert sessions, f
        for s in sessions:
            assert s.session_id and s.created and s.modified and s.created <= s.modified, f
            assert s.created.endswith("Z") and all(c.kind in sesame.KIND_COLUMN for c in s.chunks), f
        found.extend(sessions)
    assert found
    return found


# A small corpus with distinct topics. Words of the concept queries are spread over messages.
def build_corpus(root):
    w = PiWriter(root, "aaaa1111-nix", cwd="/home/dev/infra", start="2026-01-05T10:00:00.000Z")
    w.user("The flake.nix has grown into a mess of overlays.")
    w.assistant("I'll look at the infrastructure modules first.")
    w.user("Please simplify it, keep only the dev shell and the server module.")
    w.assistant("Done: removed three overlays and merged the modules.")
    w.save()

    w = PiWriter(root, "bbbb2222-carousel", cwd="/home/dev/site", start="2026-02-01T10:00:00.000Z")
    w.user("Build an image carousel for the company website landing page.")
    w.assistant("Added a Carousel component with autoplay and swipe support.")
    w.entry("session_info", name="Landing page carousel")
    w.save()

    w = PiWriter(root, "cccc3333-ci", cwd="/home/dev/api", start="2026-02-10T10:00:00.000Z")
    w.user("CI keeps failing on the integration job, can you check?")
    w.tool("bash", {"command": "npm run test:integration"},
           "Error: connect ECONNREFUSED 127.0.0.1:5432\n    at TCPConnectWrap.afterConnect")
    w.assistant("The database service was not started before the tests; added a health check wait.")
    w.save()

    w = PiWriter(root, "dddd4444-users", cwd="/home/dev/api/services", start="2026-03-01T10:00:00.000Z")
    w.user("Add a lookup helper for the login flow.")
    w.tool("edit", {"path": "src/users/repo.py", "oldText": "pass",
                    "newText": "def get_user_by_email(email):\n    return db.users.find_one(email=email)"}, "ok")
    w.tool("write", {"path": "src/hooks/search.ts",
                     "content": "export const onType = useDebouncedCallback(fn, 300)"}, "written")
    w.assistant("Implemented the helper and a debounced search hook.")
    w.save()

    w = PiWriter(root, "eeee5555-billing", cwd="/home/dev/billing", start="2026-03-15T10:00:00.000Z")
    w.user("Invoices render with the wrong currency symbol.")
    w.tool("read", {"path": "src/billing/invoice_pdf.py"}, "def render(invoice): ...")
    w.tool("bash", {"command": "cat package.json"}, '{"name": "billing", "version": "1.0.0"}')
    w.assistant("Fixed the locale passed to the formatter.")
    w.save()

    w = PiWriter(root, "ffff6666-compact", cwd="/home/dev/flags", start="2026-04-01T10:00:00.000Z")
    w.user("Let's continue.")
    w.entry("compaction", summary="## Goal\nGradual rollout of feature flags by percentage of users.",
            firstKeptEntryId="00000001", tokensBefore=50000)
    w.assistant("Continuing with the rollout work.")
    w.save()

    w = PiWriter(root, "abab7777-thinking", cwd="/home/dev/misc", start="2026-04-10T10:00:00.000Z")
    w.user("Rename the variables in utils.")
    w.assistant("Renamed them.", thinking="Maybe this relates to the kubernetes autoscaler somehow.")
    w.save()

    w = PiWriter(root, "cdcd8888-k8s", cwd="/home/dev/cluster", start="2026-04-11T10:00:00.000Z")
    w.user("The kubernetes autoscaler does not add nodes under load.")
    w.assistant("The autoscaler lacked permissions; fixed the role binding.")
    w.save()

    w = PiWriter(root, "efef9999-toolonly", cwd="/home/dev/scripts", start="2026-04-12T10:00:00.000Z")
    w.user("Run the deploy script.")
    w.tool("bash", {"command": "./deploy.sh"}, "uploading artifacts to bucket zanzibar-releases\nE403 forbidden")
    w.assistant("The upload failed.")
    w.save()

    w = PiWriter(root, "1212aaaa-tooltalk", cwd="/home/dev/scripts", start="2026-04-13T10:00:00.000Z")
    w.user("Why does the release upload return E403 from the bucket?")
    w.assistant("E403 means the bucket policy denies the upload role.")
    w.save()


@pytest.fixture
def corpus(env, capsys):
    build_corpus(env)
    code, _, err = run(capsys, "index")
    assert code == 0, err
    return env


# ==================================================================================================
# Start-up: installed as a command, the file runs from a cached code object
# ==================================================================================================

def install(tmp_path, source=None, **extra_env):
    """Install sesame the README's way into tmp_path/bin; returns run(*argv) -> CompletedProcess."""
    bindir = tmp_path / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    exe = str(bindir / "sesame")
    shutil.copy(source or os.path.join(HERE, "sesame.py"), exe)
    os.chmod(exe, 0o755)
    env = dict(os.environ, PATH=str(bindir) + os.pathsep + os.environ.get("PATH", ""), HOME=str(tmp_path),
               XDG_CACHE_HOME=str(tmp_path / "cache"), SESAME_DATA_DIR=str(tmp_path / "data"),
               SESAME_CONFIG_DIR=str(tmp_path / "config"), NO_COLOR="1")
    env.pop("SESAME_CACHE_DIR", None)
    env.pop("SESAME_PYTHON", None)
    env.update(extra_env)

    def run_installed(*argv, cwd=None):
        return subprocess.run(["sesame"] + list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    run_installed.exe, run_installed.env = exe, env
    return run_installed


def readme_blocks(language="sh"):
    """The README's fenced code blocks of one language, in order."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return re.findall(r"```%s\n(.*?)```" % language, f.read(), re.S)


def test_the_readme_install_command_works_on_a_fresh_account(tmp_path):
    install_block = readme_blocks()[0]
    assert "~/.local/bin" in install_block
    home, work = tmp_path / "home", tmp_path / "checkout"
    home.mkdir()
    work.mkdir()
    shutil.copy(os.path.join(HERE, "sesame.py"), str(work / "sesame.py"))
    python_dir = os.path.dirname(os.path.realpath(sys.executable))
    env = {"HOME": str(home), "PATH": python_dir + os.pathsep + "/usr/bin:/bin", "LANG": "C.UTF-8"}
    r = subprocess.run(["sh", "-c", install_block], cwd=str(work), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "sesame " + sesame.__version__ in r.stdout and "add ~/.local/bin to your PATH" in r.stdout
    env["PATH"] = str(home / ".local" / "bin") + os.pathsep + env["PATH"]
    r = subprocess.run(["sh", "-c", install_block + "\nsesame --version"], cwd=str(work), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "PATH" not in r.stdout and r.stdout.count("sesame " + sesame.__version__) == 2


def test_every_readme_shell_block_that_runs_offline_runs_as_written(tmp_path):
    # The install block has its own test above; installing packages and the benchmark need the
    # network or many minutes. Every other `sh` block runs, in order, as a new user would type it:
    # `sesame` on PATH, pi sessions where pi keeps them, no config, in a checkout of this repository.
    sesame_cmd = install(tmp_path, SESAME_DATA_DIR=str(tmp_path / "data"))
    build_corpus(tmp_path / ".pi" / "agent" / "sessions")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("SKILL.md", "README.md"):
        shutil.copy(os.path.join(HERE, name), str(checkout / name))
    blocks = [b for b in readme_blocks()[1:] if "pip install" not in b and "SESAME_BENCH" not in b]
    assert len(blocks) >= 3
    for block in blocks:
        r = subprocess.run(["sh", "-ec", block], cwd=str(checkout), env=sesame_cmd.env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (block, r.stderr)
        if block.startswith("sesame search"):
            assert "Found 1 session" in r.stdout, r.stdout
    assert (tmp_path / ".claude" / "skills" / "sesame" / "SKILL.md").exists()


def test_every_readme_config_example_works_as_written(tmp_path):
    # Copied as they are into a fresh account's config (folders they name may not exist there).
    blocks = readme_blocks("jsonc")
    assert len(blocks) >= 2
    for block in blocks:
        sesame_cmd = install(tmp_path / ("c%d" % blocks.index(block)))
        os.makedirs(sesame_cmd.env["SESAME_CONFIG_DIR"])
        with open(os.path.join(sesame_cmd.env["SESAME_CONFIG_DIR"], "config.jsonc"), "w") as f:
            f.write(block)
        for argv in (["status"], ["search", "anything"], ["sources"]):
            r = sesame_cmd(*argv)
            assert r.returncode == 0 and "Traceback" not in r.stderr, (block, argv, r.stderr)


def test_every_flag_and_json_field_the_skill_names_exists(corpus, capsys):
    with open(os.path.join(HERE, "SKILL.md"), encoding="utf-8") as f:
        skill = f.read()
    known = set()
    for command in ("search", "show", "index"):
        parser = sesame.build_parser(command)
        for action in parser._subparsers._group_actions[0].choices[command]._actions:
            known.update(action.option_strings)
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", skill)) - {"--"}
    assert flags and flags <= known, flags - known
    result = json.loads(run(capsys, "search", "carousel", "--json", "--fields", "full")[1])["results"][0]
    for field in re.findall(r"`(\w+)`", skill.split("## Reading the JSON")[1].split("## Read a session")[0]):
        if field in sesame.FIELD_PRESETS["full"]:
            assert field in result, field


def test_installed_command_fills_a_private_code_cache_and_remembers_the_interpreter(tmp_path):
    sesame_cmd = install(tmp_path)
    r = sesame_cmd("--version")
    assert r.returncode == 0 and r.stdout.strip() == "sesame " + sesame.__version__, r.stderr
    cache = tmp_path / "cache" / "sesame"
    entries = [e for e in os.listdir(cache) if e.startswith("code-")]
    assert len(entries) == 1
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / entries[0]).st_mode) == 0o600
    remembered = (cache / "python").read_text().strip()
    assert os.path.isabs(remembered) and os.access(remembered, os.X_OK)
    # The second start runs from the cache (same entry, nothing recompiled) and answers the same.
    before = os.stat(cache / entries[0]).st_mtime_ns
    assert sesame_cmd("--version").stdout == r.stdout
    assert os.stat(cache / entries[0]).st_mtime_ns == before


def test_an_edited_file_never_runs_from_the_old_cache_entry(tmp_path):
    sesame_cmd = install(tmp_path)
    edited = "9" * len(sesame.__version__)
    assert sesame_cmd("--version").stdout.strip() == "sesame " + sesame.__version__
    with open(sesame_cmd.exe) as f:
        text = f.read()
    was = os.stat(sesame_cmd.exe)
    with open(sesame_cmd.exe, "w") as f:  # same length: only the bytes differ
        f.write(text.replace('__version__ = "%s"' % sesame.__version__, '__version__ = "%s"' % edited, 1))
    os.utime(sesame_cmd.exe, ns=(was.st_atime_ns, was.st_mtime_ns))  # and its time set back (cp -p, rsync -t)
    assert sesame_cmd("--version").stdout.strip() == "sesame " + edited
    assert len([e for e in os.listdir(tmp_path / "cache" / "sesame") if e.startswith("code-")]) == 2


def test_an_unusable_cache_folder_or_a_damaged_entry_only_costs_speed(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    sesame_cmd = install(tmp_path, XDG_CACHE_HOME=str(blocker))
    r = sesame_cmd("--version")
    assert r.returncode == 0 and r.stdout.strip() == "sesame " + sesame.__version__ and not r.stderr
    sesame_cmd = install(tmp_path / "second")
    sesame_cmd("--version")
    cache = tmp_path / "second" / "cache" / "sesame"
    for e in os.listdir(cache):
        if e.startswith("code-"):
            (cache / e).write_bytes(b"\xe3garbage")
    r = sesame_cmd("--version")
    assert r.returncode == 0 and r.stdout.strip() == "sesame " + sesame.__version__ and not r.stderr
    if hasattr(os, "mkfifo"):  # FIFOs where the entries and the interpreter's name are kept wait for nobody
        for e in os.listdir(cache):
            os.remove(cache / e)
            os.mkfifo(cache / e)
        r = sesame_cmd("--version")  # (run() gives up after 60 s)
        assert r.returncode == 0 and r.stdout.strip() == "sesame " + sesame.__version__ and not r.stderr


def test_a_remembered_interpreter_that_is_gone_falls_back_to_python3_on_path(tmp_path):
    sesame_cmd = install(tmp_path)
    cache = tmp_path / "cache" / "sesame"
    cache.mkdir(parents=True)
    (cache / "python").write_text("/nonexistent/python3\n")
    r = sesame_cmd("--version")
    assert r.returncode == 0 and r.stdout.strip() == "sesame " + sesame.__version__
    assert (cache / "python").read_text().strip() != "/nonexistent/python3"


def test_sesame_python_chooses_the_interpreter(tmp_path):
    older = next(iter(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3"))), None)
    if not older and shutil.which("python3.9") and "shims" not in shutil.which("python3.9"):
        older = shutil.which("python3.9")
    if not older:
        pytest.skip("no Python 3.9 here")
    sesame_cmd = install(tmp_path, SESAME_PYTHON=older)
    r = sesame_cmd("status", "--json")
    assert r.returncode == 0, r.stderr
    assert any(e.startswith("code-cpython-39-") for e in os.listdir(tmp_path / "cache" / "sesame"))


def test_the_installed_command_does_not_import_modules_from_the_current_folder(tmp_path):
    sesame_cmd = install(tmp_path)
    trap = tmp_path / "project"
    trap.mkdir()
    (trap / "json.py").write_text("raise SystemExit('imported json.py from the current folder')\n")
    r = sesame_cmd("--version", cwd=str(trap))
    assert r.returncode == 0 and "imported" not in r.stderr, r.stderr


def test_the_installed_command_turns_sqlites_memory_statistics_off_and_a_program_importing_it_does_not(
        tmp_path, capsys):
    """SQLite's memory statistics take a lock at every allocation (see SQLITE_TUNE): the command,
    run as installed, turns them off before its first connection, where the ABI lets ctypes call
    sqlite3_config; a program that imports the file (and may hold connections of its own) keeps
    SQLite as it is."""
    sesame_cmd = install(tmp_path)
    PiWriter(tmp_path / ".pi" / "agent" / "sessions", "stats-0001", cwd="/home/dev/app").user(
        "the okapi migration").assistant("done").save()
    r = sesame_cmd("search", "okapi", "--json")
    assert r.returncode == 0 and [x["sessionId"] for x in json.loads(r.stdout)["results"]] == ["stats-0001"], r.stderr
    supported = sys.platform.startswith("linux") and os.uname().machine.lower() in ("x86_64", "amd64", "aarch64", "arm64")
    r = sesame_cmd("status", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["sqliteMemoryStatistics"] is not supported, r.stdout
    assert ("memory statistics off" in sesame_cmd("status").stdout) is supported
    # What turning them off does: SQLite then counts nothing (a process of its own: it cannot be
    # turned on again while connections are open)
    probe = ("import sys, ctypes; sys.path.insert(0, %r); import sesame\n"
             "sesame.SQLITE_TUNE['pending'] = True\n"
             "con = sesame.sqlite_connect(':memory:'); con.execute('CREATE TABLE t(x)')\n"
             "con.executemany('INSERT INTO t VALUES (?)', [('x' * 1000,)] * 1000)\n"
             "lib = ctypes.CDLL(sesame.sqlite3.__file__); lib.sqlite3_memory_used.restype = ctypes.c_int64\n"
             "print(sesame.SQLITE_TUNE['memoryStatistics'], lib.sqlite3_memory_used())" % HERE)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    statistics, used = r.stdout.split()
    assert (statistics, used == "0") == (str(not supported), supported), r.stdout
    # in-process: untouched
    code, out, _ = run(capsys, "status", "--json")
    assert code == 0 and json.loads(out)["sqliteMemoryStatistics"] is True
    assert sesame.SQLITE_TUNE["memoryStatistics"] is None


def test_script_module_and_import_forms_still_work(tmp_path):
    env = dict(os.environ, SESAME_DATA_DIR=str(tmp_path / "d"), SESAME_CONFIG_DIR=str(tmp_path / "c"))
    for argv in ([sys.executable, os.path.join(HERE, "sesame.py"), "--version"],
                 [sys.executable, "-m", "sesame", "--version"]):
        r = subprocess.run(argv, env=dict(env, PYTHONPATH=HERE), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "sesame " + sesame.__version__, (argv, r.stderr)
    assert sesame.__doc__.startswith("Sesame: find old coding-agent sessions")


def test_the_command_leaves_at_once_yet_its_output_is_whole_and_a_failed_write_is_an_error(tmp_path, capsys):
    # The installed command ends with os._exit after flushing (no interpreter teardown): what it
    # printed must all be there, to a pipe or a file; output it could not write is one line, exit 1.
    sesame_cmd = install(tmp_path)
    w = PiWriter(tmp_path / ".pi" / "agent" / "sessions", "exit-0001", cwd="/home/dev/app")
    for i in range(300):  # a long session: more than one pipe buffer of JSON
        w.user("the wombat migration step %d" % i).assistant("done with wombat step %d" % i)
    w.save()
    assert sesame_cmd("index").returncode == 0
    r = sesame_cmd("show", "exit-0001", "--json", "--max-chars", "0")
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert len(r.stdout) > 65536 and "wombat step 299" in json.loads(r.stdout)["chunks"][-1]["text"]
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            r = subprocess.run(["sesame", "search", "wombat", "--json"], env=sesame_cmd.env, stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=60)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "cannot write the output" in r.stderr, r.stderr
    r = subprocess.run("sesame search wombat | head -c 10", shell=True, env=sesame_cmd.env, capture_output=True,
                       text=True, timeout=60)
    assert r.stdout and "Traceback" not in r.stderr and "Exception" not in r.stderr, r.stderr
    # In-process, --version and --help are exit codes too (argparse's SystemExit does not escape main).
    assert sesame.main(["--version"]) == 0 and capsys.readouterr().out.strip() == "sesame " + sesame.__version__
    assert sesame.main(["search", "--help"]) == 0 and "--json" in capsys.readouterr().out


# ==================================================================================================
# Paths and config
# ==================================================================================================

def test_jsonc_allows_comments_and_trailing_commas_but_keeps_slashes_inside_strings():
    text = '{\n  // a comment\n  "url": "http://example.com/a//b", /* block\n comment */\n  "list": [1, 2,],\n}\n'
    assert json.loads(sesame.jsonc_to_json(text)) == {"url": "http://example.com/a//b", "list": [1, 2]}


def test_broken_config_is_one_line_error_naming_file_and_line(env, tmp_path, capsys):
    write_config(None, tmp_path, text='{\n  "sources": [\n    {"parser": "pi" "path": "x"}\n  ]\n}\n')
    code, out, err = run(capsys, "status")
    assert code == 1
    assert "config.jsonc: line 3" in err and err.count("\n") == 1


@pytest.mark.parametrize("cfg,needle", [
    ({"sources": [{"parser": "nosuch", "path": "/tmp"}]}, "unknown parser 'nosuch'"),
    ({"sources": "pi"}, "must be a list"),
    ({"sources": {"parser": "pi", "path": "/tmp"}}, '"sources" must be a list'),
    ({"sources": None}, '"sources" must be a list'),
    ({"sources": [{"parser": "pi", "path": ""}]}, "sources[0]: the path is empty"),
    ({"sources": [{"parser": "pi", "path": "  "}]}, "the path is empty"),
    ({"piSessionPaths": "/tmp"}, '"piSessionPaths" must be a list of strings'),
    ({"piSessionPaths": 5}, '"piSessionPaths" must be a list of strings'),
    ({"piSessionPaths": {"a": "/tmp"}}, '"piSessionPaths" must be a list of strings'),
    ({"piSessionPaths": [""]}, "piSessionPaths[0]: the path is empty"),
    ({"exclude": ["/tmp/x", ""]}, '"exclude" must be a list of path patterns (non-empty strings)'),
    ({"exclude": "/tmp/x"}, '"exclude" must be a list'),
    ({"sources": [{"parser": "pi", "path": "/tmp"}], "discover": "yes"}, '"discover" must be true or false'),
])
def test_config_of_the_wrong_shape_is_a_one_line_error(env, tmp_path, capsys, cfg, needle):
    write_config(cfg, tmp_path)
    for argv in (("search", "anything"), ("status",)):
        code, _, err = run(capsys, *argv)
        assert code == 1 and needle in err and one_line_error(err), err


def test_a_folder_of_projects_is_indexed_beside_the_agents_found_on_their_own_with_discover(env, tmp_path, capsys):
    """Aider, SpecStory and Crush keep their history inside each project: found only under a folder
    the config names. A config that names sources indexes those alone, unless it says
    "discover": true: then every agent's default place too (Claude Code's here), once each."""
    claude = tmp_path / "home" / ".claude" / "projects" / "-home-dev-app"
    write_jsonl(claude / "11111111-2222-4333-8444-555555555555.jsonl", [dict(cc_cl_user(
        "u1", "2026-05-01T10:00:00.000Z", "the axolotl tank pump"), sessionId="11111111-2222-4333-8444-555555555555",
        cwd="/home/dev/app")])
    write_file(tmp_path / "code" / "proj" / ".aider.chat.history.md", am_AIDER_HISTORY)
    aider_word = "flaky"
    code, out, _ = run(capsys, "sources")   # the env's config names pi's folder alone: no folder of projects
    assert code == 0 and "aider        -           0 sessions  0 files  inside projects (*.aider.chat.history.md)" in out
    assert '"discover": true' in out and "keep their history inside each project" in out
    rows = {r["agent"]: r for r in json.loads(run(capsys, "sources", "--json")[1])["sources"]}
    assert rows["aider"]["projectFiles"] == ["*.aider.chat.history.md"] and rows["claude"]["projectFiles"] == []

    write_config({"sources": [{"parser": "aider", "path": str(tmp_path / "code")}]}, tmp_path)
    assert run(capsys, "index")[0] == 0
    assert [r["agent"] for r in search_json(capsys, aider_word)["results"]] == ["aider"]
    assert search_ids(capsys, "axolotl") == []   # named sources alone: Claude Code's place is not looked at

    write_config({"sources": [{"parser": "aider", "path": str(tmp_path / "code")},
                              {"parser": "claude", "path": str(tmp_path / "home" / ".claude" / "projects")}],
                  "discover": True}, tmp_path)
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "axolotl") == ["11111111-2222-4333-8444-555555555555"]
    assert [r["agent"] for r in search_json(capsys, aider_word)["results"]] == ["aider"]
    rows = {r["agent"]: r for r in json.loads(run(capsys, "sources", "--json")[1])["sources"]}
    assert [l["path"] for l in rows["claude"]["locations"]] == [str(tmp_path / "home" / ".claude" / "projects")]  # once
    assert rows["aider"]["active"] and rows["claude"]["active"]
    hint = run(capsys, "sources")[1].strip().splitlines()[-1]   # Aider's folder is named now: the others only
    assert hint.startswith("SpecStory, Crush keep their history inside each project")


def test_someone_who_uses_only_aider_finds_its_history_by_searching_from_the_project(tmp_path, capsys, monkeypatch):
    # No agent keeps sessions in the home folder: the search said "no agent sessions found in their
    # usual places" and never looked in the folder it ran from, on every search. An MCP server run in
    # that project (its first call) finds it likewise.
    home = bare_home(tmp_path, monkeypatch)
    proj, other = home / "code" / "proj", home / "code" / "other"
    write_file(proj / ".aider.chat.history.md", am_AIDER_HISTORY)
    write_file(other / "pkg" / "src" / ".keep", "")
    write_file(other / ".aider.chat.history.md",
               "# aider chat started at 2026-05-02 11:00:00\n\n#### the gantry winch squeaks  \n\nOiled it.\n")
    monkeypatch.chdir(proj)
    assert [r["agent"] for r in search_json(capsys, "uploader backoff")["results"]] == ["aider"]
    reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "search", "arguments": {"query": "gantry winch"}}}, None)
    assert reply["result"]["structuredContent"]["results"] == []   # (not from here: nothing ran in `other`)
    monkeypatch.chdir(other / "pkg" / "src")   # two folders below it
    warm = sesame.WarmIndex()
    try:
        reply = sesame.handle_message({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search", "arguments": {"query": "gantry winch"}}}, warm)
        assert [r["agent"] for r in reply["result"]["structuredContent"]["results"]] == ["aider"]
    finally:
        warm.close()
    monkeypatch.chdir(tmp_path)   # both are sources from then on, wherever one searches
    assert len(search_json(capsys, "uploader backoff")["results"]) == 1
    assert len(search_json(capsys, "gantry winch")["results"]) == 1


def test_histories_kept_inside_projects_are_found_where_sessions_ran_and_where_one_searches(tmp_path, capsys, monkeypatch):
    """With no config, an Aider history in a folder where a Claude Code session ran is indexed by
    `index`, a SpecStory history in the folder a search runs from by that search; both are sources
    from then on (appends read, a deleted one kept), a server made before they were found keeps
    them, and a config that names the sources leaves them out."""
    home = bare_home(tmp_path, monkeypatch)
    shop, kiosk = home / "code" / "shop", home / "code" / "kiosk"
    sid = "11111111-2222-4333-8444-555555555555"
    write_jsonl(home / ".claude" / "projects" / "-home-code-shop" / (sid + ".jsonl"), [dict(cc_cl_user(
        "u1", "2026-05-01T10:00:00.000Z", "the axolotl tank pump"), sessionId=sid, cwd=str(shop))])
    aider = write_file(shop / ".aider.chat.history.md", am_AIDER_HISTORY)
    write_file(kiosk / ".specstory" / "history" / "2025-03-21_21-16-flaky-upload-test.md", ss_OLD)
    for n, odd in enumerate(("/srv/a\x00b", "/srv/\udcff", "C:\\Users\\me\\shop", "")):   # folders no disk has
        other = "3111111%d-2222-4333-8444-555555555555" % n
        write_jsonl(home / ".claude" / "projects" / "-odd" / (other + ".jsonl"), [dict(cc_cl_user(
            "u1", "2026-05-01T10:00:00.000Z", "the odd folder %d" % n), sessionId=other, cwd=odd)])
    server = sesame.Context()   # (a server made now, before any history inside a project is known)
    monkeypatch.chdir(tmp_path)
    # The first search builds the index, then looks in the folders of the sessions it read.
    assert [r["agent"] for r in search_json(capsys, "uploader backoff")["results"]] == ["aider"]
    assert search_ids(capsys, "ephemeral port") == []   # no session ran in kiosk
    # `index` finds a history in a folder where a session indexed since ran.
    sid2 = "21111111-2222-4333-8444-555555555555"
    write_jsonl(home / ".claude" / "projects" / "-home-code-dock" / (sid2 + ".jsonl"), [dict(cc_cl_user(
        "u1", "2026-05-02T10:00:00.000Z", "the dock crane"), sessionId=sid2, cwd=str(home / "code" / "dock"))])
    write_file(home / "code" / "dock" / "notes.aider.chat.history.md",
               "# aider chat started at 2026-05-02 11:00:00\n\n#### the gantry winch  \n\nOiled.\n")
    code, out, _ = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["filesIndexed"] == 2   # the session, then the history in its folder
    assert [r["agent"] for r in search_json(capsys, "gantry winch")["results"]] == ["aider"]
    monkeypatch.chdir(kiosk)
    assert [r["agent"] for r in search_json(capsys, "ephemeral port")["results"]] == ["specstory"]
    lab = write_file(home / "code" / "lab" / ".aider.chat.history.md", "# aider chat started at 2026-05-03 09:00:00\n\n"
                     "> Cur working dir: /elsewhere/lab\n\n#### the pelican centrifuge  \n\nBalanced.\n")
    monkeypatch.chdir(lab.parent)   # (its session says it ran elsewhere: found here only)
    assert [r["agent"] for r in search_json(capsys, "pelican centrifuge")["results"]] == ["aider"]
    rows = {r["agent"]: r for r in json.loads(run(capsys, "sources", "--json")[1])["sources"]}
    assert [l["path"] for l in rows["aider"]["locations"]] == [str(aider), str(home / "code" / "dock" / "notes.aider.chat.history.md"), str(lab)]
    assert rows["aider"]["active"]
    assert [l["path"] for l in rows["specstory"]["locations"]] == [str(kiosk / ".specstory" / "history")]
    out = run(capsys, "sources")[1]
    assert "inside projects (.crush/crush.db, .crush/crush.db-wal): none found yet where sessions ran" in out
    assert "found where other agents' sessions ran and where you search from" in out.splitlines()[-1]
    origins = {s["parser"]: s["origin"] for s in json.loads(run(capsys, "status", "--json")[1])["sources"]}
    assert origins["aider"] == origins["specstory"] == "project" and origins["claude"] == "discovered"
    monkeypatch.chdir(tmp_path)
    # A server's background round (it looked in every session's folder lately: not now) compares
    # every file with the sources it was made with and those other processes found since.
    monkeypatch.setitem(sesame._PROJECTS_LOOKED, os.path.abspath(str(tmp_path / "data")), time.monotonic())
    store = server.store()
    try:
        summary = sesame.refresh_index(server, store, wait_seconds=5, lend=True)
    finally:
        store.close()
    assert {s.path for s in server.sources if s.origin == "project"} == {str(aider), str(kiosk / ".specstory" / "history"),
                                                                      str(home / "code" / "dock" / "notes.aider.chat.history.md"), str(lab)}
    assert summary is not None and summary.removed == 0
    assert search_json(capsys, "uploader backoff")["results"][0]["agent"] == "aider"
    assert search_json(capsys, "ephemeral port")["results"][0]["agent"] == "specstory"
    with open(aider, "a") as f:
        f.write("\n# aider chat started at 2026-11-26 08:00:00\n\n#### the heron feeder  \n\nDone.\n")
    assert [r["agent"] for r in search_json(capsys, "heron feeder")["results"]] == ["aider"]
    aider.unlink()
    kept = search_json(capsys, "heron feeder")["results"]
    assert [r["agent"] for r in kept] == ["aider"] and kept[0]["fileDeleted"] is True
    (tmp_path / "data" / "projects").unlink()   # the list lost: found again from what the index holds
    code, out, _ = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["filesRemoved"] == 0
    assert search_json(capsys, "ephemeral port")["results"][0]["agent"] == "specstory"
    assert [r["agent"] for r in search_json(capsys, "pelican centrifuge")["results"]] == ["aider"]
    write_config({"sources": [{"parser": "claude", "path": str(home / ".claude" / "projects")}]}, tmp_path)
    data = json.loads(run(capsys, "sources", "--json")[1])
    rows = {r["agent"]: r for r in data["sources"]}
    assert not rows["specstory"]["active"] and rows["specstory"]["locations"] == [] and data["projectsFound"] is False


def test_config_with_a_byte_order_mark_and_relative_paths_from_its_own_folder(env, tmp_path, capsys, monkeypatch):
    PiWriter(env, "bom-1").user("the capybara config").save()
    write_config(None, tmp_path, text='\ufeff{"sources": [{"parser": "pi", "path": "../pi-sessions"}]}')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)   # relative to the config file's folder, not to where sesame runs
    assert search_ids(capsys, "capybara") == ["bom-1"]
    code, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)["sources"][0]["path"] == str(env)


def test_unknown_config_keys_are_warned_with_the_nearest_known_key(env, tmp_path, capsys):
    PiWriter(env, "warn-1").user("the ocelot config").save()
    write_config({"sources": [{"parser": "pi", "path": str(env), "paht": "x"}], "source": [], "exlude": [],
                  "keepDeletedSessions": True, "redact": True}, tmp_path)
    code, out, err = run(capsys, "search", "ocelot")
    assert code == 0 and "warn-1" in out
    assert "unknown key 'source', ignored; did you mean 'sources'?" in err
    assert "unknown key 'exlude', ignored; did you mean 'exclude'?" in err
    assert "sources[0]: unknown key 'paht', ignored; did you mean 'path'?" in err
    assert "keepDeletedSessions" not in err and "redact" not in err and "Traceback" not in err


def test_a_configured_folder_that_does_not_exist_is_a_warning_and_the_rest_is_indexed(env, tmp_path, capsys):
    PiWriter(env, "drive-1").user("the tapir on the internal disk").save()
    gone = str(tmp_path / "unplugged-drive" / "sessions")
    write_config({"sources": [{"parser": "pi", "path": gone}, {"parser": "pi", "path": str(env)}]}, tmp_path)
    code, out, err = run(capsys, "search", "tapir")
    assert code == 0 and "drive-1" in out and "warning:" in err and gone in err and "Traceback" not in err
    code, out, err = run(capsys, "status")
    assert code == 0 and "warning:  " in out and gone in out
    info = json.loads(run(capsys, "status", "--json")[1])
    assert info["sessions"] == 1 and any(gone in w for w in info["warnings"])
    r = mcp_call("status", {})
    assert r["isError"] is False and any(gone in w for w in r["structuredContent"]["warnings"])
    assert mcp_call("search", {"query": "tapir"})["structuredContent"]["results"][0]["sessionId"] == "drive-1"


def test_exclude_patterns_by_the_hundred_thousand_cost_a_few_tests_per_path(monkeypatch):
    import fnmatch

    def reference(path, pattern):   # what one pattern means (README, Config)
        if any(c in pattern for c in "*?["):
            return fnmatch.fnmatchcase(path, pattern)
        return path == pattern or path.startswith(pattern.rstrip("/") + "/")
    patterns = ["/home/u/private/p%06d" % i for i in range(200000)]
    patterns += ["*/scratch%d/*" % i for i in range(2000)] + ["/home/u/tmp*/*.log", "/data/??/cache", "*.bak"]
    expect = {"/home/u/private/p000123": True, "/home/u/private/p000123/s.jsonl": True,
              "/home/u/private/p0001234": False, "/home/u/private": False, "/srv/x/scratch17/a.jsonl": True,
              "/srv/x/scratch17": False, "/home/u/tmp3/a/b.log": True, "/home/u/tmp3/a/b.txt": False,
              "/data/ab/cache": True, "/data/abc/cache": False, "/x/y.bak": True, "/x/y.bak2": False,
              "/home/dev/code/project/session.jsonl": False}
    for path, excluded in expect.items():
        assert any(reference(path, p) for p in patterns) is excluded, path
    policy = sesame.Policy(patterns)
    tests = []
    real = fnmatch.fnmatchcase
    monkeypatch.setattr(fnmatch, "fnmatchcase", lambda name, pat: tests.append(pat) or real(name, pat))
    for path, excluded in expect.items():
        assert policy.excludes_path(path) is excluded, path
    assert len(tests) <= 3 * len(expect)   # a few glob tests per path, not one per pattern


def test_config_paths_expand_home_and_env_vars_and_older_form_is_accepted(env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MY_SESSIONS", str(env))
    PiWriter(env, "1234-old").user("quokka sighting").save()
    write_config(None, tmp_path, text='{"piSessionPaths": ["$MY_SESSIONS"], // legacy key\n}')
    assert search_ids(capsys, "quokka") == ["1234-old"]


def test_without_config_default_locations_are_discovered_and_status_says_so(env, tmp_path, capsys, monkeypatch):
    os.remove(tmp_path / "config" / "config.jsonc")
    agent_dir = tmp_path / "pi-agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent_dir))
    PiWriter(agent_dir / "sessions", "5678-disc").user("platypus migration").save()
    assert search_ids(capsys, "platypus") == ["5678-disc"]
    code, out, _ = run(capsys, "status", "--json")
    info = json.loads(out)
    assert {"parser": "pi", "path": str(agent_dir / "sessions"), "origin": "discovered", "exists": True} in info["sources"]
    assert info["configFound"] is False


def test_data_dir_follows_xdg_when_sesame_dir_is_unset(monkeypatch):
    env = {"XDG_DATA_HOME": "/x/data", "XDG_CONFIG_HOME": "/x/cfg", "HOME": "/h"}
    assert sesame.index_path(env) == "/x/data/sesame/index.sqlite"
    assert sesame.config_path(env) == "/x/cfg/sesame/config.jsonc"
    assert sesame.index_path({"SESAME_DATA_DIR": "/s"}) == "/s/index.sqlite"


# ==================================================================================================
# Time
# ==================================================================================================

@pytest.mark.parametrize("value,expected", [
    ("2026-03-10T09:00:05.123Z", "2026-03-10T09:00:05.123Z"),
    ("2026-03-10T10:00:05+01:00", "2026-03-10T09:00:05.000Z"),
    (1773133205, "2026-03-10T09:00:05.000Z"),
    (1773133205123, "2026-03-10T09:00:05.123Z"),
    ("1773133205123", "2026-03-10T09:00:05.123Z"),
    ("not a date", None),
])
def test_timestamps_in_every_encoding_become_iso_utc(value, expected):
    assert sesame.norm_time(value) == expected


def test_naive_timestamps_are_local_time(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    if hasattr(__import__("time"), "tzset"):
        __import__("time").tzset()
    try:
        assert sesame.norm_time("2026-01-10 09:00:00") == "2026-01-10T14:00:00.000Z"
    finally:
        monkeypatch.delenv("TZ")
        __import__("time").tzset()


def test_relative_dates_and_bad_dates():
    now = sesame.parse_time("2026-03-10T00:00:00Z")
    assert sesame.iso(sesame.parse_when("7d", now)) == "2026-03-03T00:00:00.000Z"
    assert sesame.iso(sesame.parse_when("2w", now)) == "2026-02-24T00:00:00.000Z"
    assert sesame.iso(sesame.parse_when("12h", now)) == "2026-03-09T12:00:00.000Z"
    assert sesame.parse_when("2026-01-02", now).year == 2026
    for bad in ("soon", "week", "m", "2025-13", "2026-02-30", "tuesdays", "marchx 2025"):
        with pytest.raises(sesame.UsageError, match="cannot read the date"):
            sesame.parse_when(bad, now)
    with pytest.raises(sesame.UsageError, match="out of range"):
        sesame.parse_when("99999999999999 days ago", now)


def test_dates_people_and_agents_type(monkeypatch):
    # An agent asked for "the session from last week" passes `--after "last week"`; `2 weeks ago`,
    # `this month`, `monday`, `2025-11` and `nov 2025` were refused ("cannot read the date").
    monkeypatch.setenv("TZ", "UTC")
    __import__("time").tzset()
    try:
        _dates_people_and_agents_type()
    finally:
        monkeypatch.undo()
        __import__("time").tzset()


def _dates_people_and_agents_type():
    now = sesame.parse_time("2026-03-11T15:00:00Z")   # a Wednesday
    when = lambda text: sesame.iso(sesame.parse_when(text, now))  # noqa: E731
    assert when("3 days ago") == when("3d") == when("past 3 days") == "2026-03-08T15:00:00.000Z"
    assert when("last week") == when("a week ago") == when("1 week") == when("7d") == "2026-03-04T15:00:00.000Z"
    assert when("2 weeks") == when("2w") and when("last month") == when("30 days ago") == when("1m")
    assert when("30min") == when("30 minutes ago") == "2026-03-11T14:30:00.000Z" and when("24 hours") == when("1d")
    assert when("this week") == when("monday") == when("last Monday") == "2026-03-09T00:00:00.000Z"
    assert when("wednesday") == when("today") == "2026-03-11T00:00:00.000Z"
    assert when("last wednesday") == "2026-03-04T00:00:00.000Z" and when("this month") == "2026-03-01T00:00:00.000Z"
    assert when("2025-11") == when("Nov 2025") == when("november 2025") == when("2025/11/01") == "2025-11-01T00:00:00.000Z"
    assert when("sep 8, 2025") == when("8 Sept 2025") == when("2025-09-08") == "2025-09-08T00:00:00.000Z"
    assert when("2025") == when("this year").replace("2026", "2025") == "2025-01-01T00:00:00.000Z"
    assert when("may") == "2025-05-01T00:00:00.000Z" and when("march") == "2026-03-01T00:00:00.000Z"   # the last one


# ==================================================================================================
# Privacy: secrets redacted before indexing, exclude, forget
# ==================================================================================================

# Fake secrets built at run time, so that this file itself does not trip secret scanners.
OPENAI = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4"
OPENAI_PROJ = "sk-proj-" + "abcDEF123_ghiJKL456-mnoPQR789stuVWX012"
ANTHROPIC = "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-DcBa_98765"
GH_PAT = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GH_OAUTH = "gho_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GH_SERVER = "ghs_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GH_FINE = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_TMP = "ASIA" + "Y34FZKBOKMUTVV7A"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_R = "rk_live_" + "51H8sd0Ax2bC3dE4fG5hI6jK"
GOOGLE = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
JWT = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
NPM = "npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
SENDGRID = "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + ".TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"
TWILIO = "SK" + "0123456789abcdef0123456789abcdef"
GROQ = "gsk_" + "Q7vR2mXk9LpT4wZs8YdN3cHf6JbG1aEu5oKi0qWe7rTy3uIo9pAs"
TELEGRAM = "7012345678" + ":AA" + "Fq3kZ_x9Lm2Nb7Vc5Xd1Sa8Df4Gh6Jk0P"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1c2s3ZkT4bD\nq8v9wPz0Yx7Lm3N2\n"
       "-----END RSA PRIVATE KEY-----")


@pytest.mark.parametrize("secret,kind", [
    (OPENAI, "openai_key"), (OPENAI_PROJ, "openai_key"), (ANTHROPIC, "anthropic_key"),
    (GH_PAT, "github_token"), (GH_OAUTH, "github_token"), (GH_SERVER, "github_token"),
    (GH_FINE, "github_token"), (AWS, "aws_access_key_id"), (AWS_TMP, "aws_access_key_id"),
    (SLACK, "slack_token"), (STRIPE, "stripe_key"), (STRIPE_R, "stripe_key"), (GOOGLE, "google_api_key"),
    (JWT, "jwt"), (HF, "huggingface_token"), (NPM, "npm_token"), (SENDGRID, "sendgrid_key"), (TWILIO, "twilio_key"),
    (GROQ, "groq_key"), (TELEGRAM, "telegram_token"),
])
def test_token_shapes_are_replaced_and_surrounding_words_stay(secret, kind):
    text = "I exported the key %s before running deploy, see zanzibar" % secret
    out, n = sesame.redact(text)
    assert secret not in out and n == 1
    assert out == "I exported the key [REDACTED:%s] before running deploy, see zanzibar" % kind


def test_bearer_header_keeps_the_scheme_word():
    out, n = sesame.redact('curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abc123def" https://api')
    assert out == 'curl -H "Authorization: Bearer [REDACTED:bearer_token]" https://api' and n == 1


@pytest.mark.parametrize("text,expected", [
    ("psql postgres://app:%s@db.internal:5432/app" % "Xk29sLq", "psql postgres://app:[REDACTED:url_password]@db.internal:5432/app"),
    ("mysql -u root -p%s orders < dump.sql" % "Hunter22", "mysql -u root -p[REDACTED:secret] orders < dump.sql"),
    ("curl -H 'Authorization: Basic %s' https://api" % "dXNlcjpwYXNzd29yZA==",
     "curl -H 'Authorization: Basic [REDACTED:basic_auth]' https://api"),
    ("Set-Cookie: %s; Path=/" % "sid=8f2a9c1b77e4", "Set-Cookie: [REDACTED:cookie]"),
    ("curl -H \"Cookie: %s\" https://x" % "session=ab12cd34", "curl -H \"Cookie: [REDACTED:cookie]\" https://x"),
    ("export DB_PASS=%s" % "w0rdsmith9", "export DB_PASS=[REDACTED:secret]"),
    ("MYSQL_PWD=%s mysqldump shop" % "k8sP4ssw", "MYSQL_PWD=[REDACTED:secret] mysqldump shop"),
    ("{'password': '%s'}" % "hunter2hunter2", "{'password': '[REDACTED:secret]'}"),
    ("pg_dump --password %s --host db" % "s3cretvalue", "pg_dump --password [REDACTED:secret] --host db"),
    ("login --token=%s" % "abcd1234efgh", "login --token=[REDACTED:secret]"),
])
def test_credentials_in_commands_urls_and_headers_are_redacted_the_rest_stays(text, expected):
    assert sesame.redact(text)[0] == expected


def test_pgp_private_key_and_a_key_whose_start_the_output_cap_dropped_are_redacted():
    pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGXbody\n-----END PGP PRIVATE KEY BLOCK-----"
    assert sesame.redact("exported:\n%s\ndone" % pgp) == ("exported:\n[REDACTED:private_key]\ndone", 1)
    body = "\n".join("MIIEow%040d" % i for i in range(400))   # a long key inside a longer output
    output = "building...\n" * 900 + "-----BEGIN RSA PRIVATE KEY-----\n" + body + "\n-----END RSA PRIVATE KEY-----\nok"
    capped = sesame.tool_text("bash", {"command": "cat build.log"}, output)
    assert "characters dropped" in capped and "-----BEGIN" not in capped
    out, n = sesame.redact(capped)
    assert "MIIEow" not in out and n == 1 and "building..." in out and out.endswith("\nok")


@pytest.mark.parametrize("text", [
    "def check_password(password):", "password = getpass()", "password = request.form['password']",
    "if not password: raise ValueError", "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "commit 3f2a9c1b77e4d5a6b8c9d0e1f2a3b4c5d6e7f809", "uuid 123e4567-e89b-12d3-a456-426614174000",
    "git clone https://github.com/org/repo.git", "mailto:bob@example.com and https://example.com",
    "PWD=/home/dev/project", "Basic usage of the API", "bypass_cache=True", "eyJ is how base64 JSON starts",
    "the SKU list", "mysql -u root -p", "ssh git@github.com", "Skipping 3 tests",
    "gsk_short_name = 1", "ticket 12345678:AA is open",
])
def test_code_about_secrets_hashes_ids_and_urls_stays_searchable(text):
    assert sesame.redact(text) == (text, 0), sesame.redact(text)


def test_pem_private_key_block_is_one_redaction_even_when_cut_off():
    out, n = sesame.redact("key file:\n%s\nthen restart nginx" % PEM)
    assert out == "key file:\n[REDACTED:private_key]\nthen restart nginx" and n == 1
    out, n = sesame.redact("truncated: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA")
    assert out == "truncated: [REDACTED:private_key]" and n == 1
    # A public key or certificate is not a secret.
    pub = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"
    assert sesame.redact(pub) == (pub, 0)


def test_private_key_blocks_are_found_as_their_expression_finds_them_in_one_pass():
    # _PrivateKeyBlocks finds the private_key shapes of _SHAPE_GROUPS without trying the
    # expression at each header (16 KB ahead each: 0.5 s for 64 KB of headers without an end).
    # It must find exactly the same spans: random texts of headers, ends, the output cap's marker
    # and fillers of lengths around the 16 KB bound, against the expression itself.
    hints, group = sesame._SHAPE_GROUPS[0]
    assert hints == ("PRIVATE KEY",) and {kind for kind, _ in group} == {"private_key"}
    expression = re.compile("|".join("(?P<%s_%d>%s)" % (kind, i, rx) for i, (kind, rx) in enumerate(group)))
    frags = ["-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN OPENSSH PRIVATE KEY BLOCK-----", "-----END PRIVATE KEY-----",
             "-----END RSA PRIVATE KEY-----", sesame.CAP_NOTE % 1234, "[... 12 characters dropped", "-----BEGIN", "-----",
             "-----BEGIN -----END PRIVATE KEY-----", "PRIVATE KEY-----END X PRIVATE KEY-----", "MIIEvQ\n", "ab "]
    rnd = random.Random(7)
    for _ in range(400):
        text = "".join(rnd.choice(frags) if rnd.random() < 0.7 else "x" * rnd.choice([1, 100, 16000, 16384, 16385])
                       for _ in range(rnd.randint(0, 24)))
        want = expression.subn(lambda m: "[REDACTED:private_key]", text)
        assert sesame._PrivateKeyBlocks().subn(None, text) == want, text[:200]
    flood = ("-----BEGIN RSA PRIVATE KEY-----\nabc\n" * 2000)[:64000]   # one block: the last header to the end
    out, n = sesame.redact(flood)
    assert n == 1 and out.endswith("[REDACTED:private_key]") and len(out) < len(flood)


def test_json_web_tokens_are_found_as_their_expression_finds_them_in_one_pass():
    # _JsonWebTokens finds the jwt shape of _SHAPE_GROUPS without going to the end of a long run
    # and back from every "eyJ" in it (1.6 s for 64 KB of "eyJ-eyJ-..."). The same spans as the
    # expression itself, on random texts of its pieces.
    group = [g for h, g in sesame._SHAPE_GROUPS if h == ("eyJ",)][0]
    expression = re.compile("|".join("(?P<%s_%d>%s)" % (kind, i, rx) for i, (kind, rx) in enumerate(group)))
    frags = ["eyJ", ".eyJ", ".", "=", "-", "_", "x" * 9, "x" * 10, " ", "é", "eyJhbGciOiJIUzI1NiJ9", "aeyJ", "-eyJ"]
    rnd = random.Random(11)
    for _ in range(3000):
        text = "".join(rnd.choice(frags) for _ in range(rnd.randint(0, 30)))
        assert sesame._JsonWebTokens().subn(None, text) == expression.subn(lambda m: "[REDACTED:jwt]", text), text
    jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    assert sesame.redact("Authorization header: %s ok" % jwt) == ("Authorization header: [REDACTED:jwt] ok", 1)
    assert sesame.redact("eyJ-" * 16000)[1] == 0


@pytest.mark.parametrize("text,expected", [
    ("DB_PASSWORD=hunter2hunter2", "DB_PASSWORD=[REDACTED:secret]"),
    ("export GITHUB_TOKEN=abcdef123456 && make", "export GITHUB_TOKEN=[REDACTED:secret] && make"),
    ("api_key: 9f8e7d6c5b4a", "api_key: [REDACTED:secret]"),
    ('{"apiKey": "live_12345abcdef", "user": "bob"}', '{"apiKey": "[REDACTED:secret]", "user": "bob"}'),
    ("client_secret = 'qwertyuiop123'", "client_secret = '[REDACTED:secret]'"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "AWS_SECRET_ACCESS_KEY=[REDACTED:secret]"),
    ("private_key: abcdefgh12345", "private_key: [REDACTED:secret]"),
    ("Passwd=Tr0ub4dor&3", "Passwd=[REDACTED:secret]"),
])
def test_secret_named_key_value_pairs_keep_the_name(text, expected):
    out, n = sesame.redact(text)
    assert out == expected and n == 1


@pytest.mark.parametrize("text", [
    "a task-based scheduler with a skeleton loader",
    "implement a token bucket rate limiter",
    "the password reset flow sends an email",
    "train the tokenizer on the corpus; tokens: 512",
    "password: ",                                # nothing to hide
    "TOKEN=${GITHUB_TOKEN}", "password = os.environ['DB_PASSWORD']", 'api_key: "<your key here>"',
    "secret: null", "token = process.env.API_TOKEN", "password=******",
    "sk-learn is not scikit-learn", "risk-free masks-off desk-top", "AKIAbc is too short",
    "the secretary said the tokenization passes", "max_tokens: 4096",
    "ask-proj-review for the bearer bonds", "Bearer of bad news",
])
def test_ordinary_text_is_left_alone(text):
    assert sesame.redact(text) == (text, 0), sesame.redact(text)


def test_several_secrets_in_one_text_are_all_counted():
    text = "first %s then %s and password=abcdefg1" % (GH_PAT, AWS)
    out, n = sesame.redact(text)
    assert n == 3 and GH_PAT not in out and AWS not in out and "abcdefg1" not in out


@pytest.mark.skipif(not os.environ.get("SESAME_BENCH"), reason="benchmark: set SESAME_BENCH=1")
def test_benchmark_redaction_speed():
    plain = ("The parser reads each line of the session file and yields the messages, "
             "then the indexer writes them in one transaction. def f(x): return x + 1\n") * 20000
    hinted = plain.replace("transaction.", "transaction. token: abc") [: len(plain)]
    for name, text in (("ordinary", plain), ("with name hints", hinted)):
        t0 = time.perf_counter()
        reps = 5
        for _ in range(reps):
            sesame.redact(text)
        dt = time.perf_counter() - t0
        print("redact %-16s %.0f MB/s" % (name, reps * len(text) / dt / 1e6))
    # a typical chunk (2 KB) including the per-call overhead
    chunk = plain[:2000]
    t0 = time.perf_counter()
    for _ in range(20000):
        sesame.redact(chunk)
    dt = time.perf_counter() - t0
    print("redact 2 KB chunks     %.0f MB/s (%.1f us per chunk)" % (20000 * 2000 / dt / 1e6, dt / 20000 * 1e6))


SECRET = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"


def index_bytes(tmp_path):
    """Everything the index holds, chunk text decompressed: where a leaked secret would be."""
    import sqlite3 as sq
    con = sq.connect(str(tmp_path / "data" / "index.sqlite"))
    texts = [sesame.unpack(t) for (t,) in con.execute("SELECT text FROM chunks")]
    con.close()
    raw = b"".join(open(str(tmp_path / "data" / f), "rb").read() for f in os.listdir(tmp_path / "data")
                   if f.startswith("index.sqlite"))
    return "\n".join(texts), raw


def test_a_parsers_checkpoint_state_is_redacted_where_it_holds_a_secret_and_kept_where_it_holds_ids():
    # The state a resumable parser stores with its file row: ids and hashes mostly, a name so far.
    ids = {"recent": ["%08x-0000-4000-8000-%012x" % (i, i) for i in range(64)], "mids": "msg_01 msg_02", "n": 3}
    assert sesame.redact_values(ids) == ids
    key = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    state = dict(ids, custom=["deploy with %s" % key, {"note": "export DB_PASSWORD=hunter2hunter2"}], cwd="/srv/app")
    got = sesame.redact_values(state)
    assert key not in json.dumps(got) and "hunter2hunter2" not in json.dumps(got)
    assert got["recent"] == ids["recent"] and got["cwd"] == "/srv/app" and got["n"] == 3
    assert got["custom"][0].startswith("deploy with [REDACTED:")


def test_secret_names_are_found_from_their_hints_exactly_where_the_pattern_finds_them():
    """_secret_words looks for the pattern only where a hint occurs (for speed): it must find every
    match a full scan finds, with the same bounds, or a secret would be kept."""
    import random
    rnd = random.Random(7)
    pieces = ["secret", "token", "password", "passwd", "api_key", "api-key", "apikey", "private_key", "accesskey",
              "auth-key", "_pass", "_pwd", "_pw", "x_pw1", "monkey", "pass", "key", "=", " ", "a", "_", "-", "i", "e", "s",
              "h", "ap", "acces", "privat", "aut", "--", "__"]
    for _ in range(3000):
        low = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 9)))
        assert [m.span() for m in sesame._secret_words(low)] == [m.span() for m in sesame._SECRET_WORD.finditer(low)], low
    assert sesame.redact("export DB_PASS=hunter2hunter2")[0] == "export DB_PASS=[REDACTED:secret]"
    # İ lower-cases to two characters: the offsets found in the lower case must still be the text's
    assert sesame.redact("İİİ İSTANBUL DB_PASS=hunter2hunter2 ok")[0] == "İİİ İSTANBUL DB_PASS=[REDACTED:secret] ok"



def test_a_long_run_of_secret_words_is_read_once_not_once_per_word(monkeypatch):
    """Each secret word inside one run of name characters ("tokentoken...", "_pw_pw...", a 64 KB
    chunk of them on a hostile disk) ends where the run ends: the run is matched once, not once per
    word (each going to the run's end and back: 20-40 s a chunk), and the value after it is found."""
    calls = collections.Counter()
    for name in ("_NAME_REST", "_FLAG_REST"):
        real = getattr(sesame, name)
        monkeypatch.setattr(sesame, name, type("Counted", (), {"match": lambda self, *a, _r=real, _n=name: calls.update([_n])
                                                                or _r.match(*a)})())
    for run, tail, want in [("token" * 20000, "=hunter2hunter2", "=[REDACTED:secret]"),
                            ("db_pw" * 20000, ": 'hunter2hunter2'", ": '[REDACTED:secret]'"),
                            ("--password" * 10000, " hunter2hunter2", " [REDACTED:secret]"),
                            ("api_key." * 10000, "", "")]:
        calls.clear()
        assert sesame.redact(run + tail)[0] == run + want
        assert calls["_NAME_REST"] <= 2 and calls["_FLAG_REST"] <= 2, calls


def test_a_session_redacted_chunk_by_chunk_equals_one_where_only_the_hinted_chunks_are():
    """Prepared redacts only the chunks that secret_hints says hold a hint (for speed): that must
    change nothing. Random sessions of chunks made of every secret, their hints alone, case
    changes, letters that lower-case to ASCII (Kelvin K) or to two characters (İ: a run of them
    before a hint must not move it into the next chunk), and filler."""
    import random
    rnd = random.Random(11)
    secrets = [OPENAI, ANTHROPIC, GH_PAT, GH_FINE, AWS, AWS_TMP, SLACK, STRIPE, GOOGLE, JWT, HF, NPM, SENDGRID,
               TWILIO, GROQ, TELEGRAM, PEM, "Authorization: Bearer abcdefghijklmnop1234", "Basic dXNlcjpwYXNzd29yZA==",
               "Cookie: sid=abcdef123", "postgres://u:hunter2hunter2@db", "mysql -u root -phunter2x",
               "API_KEY=abcdef123456", "Password: 'hunter2hunter2'", "--token abcdef12", "db_pw=abcdefgh"]
    hints = [h for hints, _ in sesame._SHAPE_GROUPS for h in hints] + ["://", "mysql", "SECRET", "Token", "\u212aEY",
                                                                      "_PW", "pass"]
    filler = ["the", "parser", "\n", " ", "İ", "İ" * 40, "ΣΑΣ", "=", ":", "'", "x" * 40, "-----END RSA PRIVATE KEY-----",
              "[... 40 characters dropped ...]\n"]
    pool = secrets + hints + filler * 3
    assert not any("i" in h for h in sesame._SECRET_HINTS)   # (secret_hints reads İ as i: no hint may hold one)
    held_some = 0
    for _ in range(400):
        chunks = ["".join(rnd.choice(pool) if rnd.random() < 0.3 else rnd.choice(filler) for _ in range(rnd.randint(0, 8)))
                  for _ in range(rnd.randint(1, 12))]
        shapes, held = sesame.secret_hints(chunks)
        everywhere = [sesame.redact(c)[0] for c in chunks]
        only_held = [sesame.redact(c, shapes)[0] if k in held else c for k, c in enumerate(chunks)]
        assert only_held == everywhere, chunks
        held_some += 0 < len(held) < len(chunks)
    assert held_some > 50   # (the sessions mix chunks with and without hints)

def test_names_summaries_labels_and_working_directories_are_redacted_too(env, tmp_path, capsys):
    w = PiWriter(env, "named-1").user("the capybara deploy")
    w.lines[0]["cwd"] = "/home/dev/token=%s/app" % "Zq81mXc0"   # (the folder name is left as it was)
    w.entry("session_info", name="rotate %s today" % GH_PAT).save()
    run(capsys, "index")
    _, raw = index_bytes(tmp_path)
    data = json.loads(run(capsys, "search", "capybara", "--json")[1])["results"][0]
    assert GH_PAT not in json.dumps(data) and "Zq81mXc0" not in json.dumps(data)
    assert GH_PAT.encode() not in raw and b"Zq81mXc0" not in raw
    assert data["name"] == "rotate [REDACTED:github_token] today"


def test_new_redaction_rules_reach_what_is_indexed_and_the_sessions_kept_from_deleted_files(env, tmp_path, capsys,
                                                                                         monkeypatch):
    live = PiWriter(env, "live-1").user("the zebra token is QQSECRET41 in staging").save()
    gone = PiWriter(env, "gone-1").user("the okapi token is QQSECRET42 in prod").save()
    run(capsys, "index")
    os.remove(gone)
    run(capsys, "index")
    assert "QQSECRET42" in index_bytes(tmp_path)[0]   # not a secret by today's rules
    # A later Sesame knows this kind of secret (and says so with a new TEXT_VERSION).
    old_redact = sesame.redact
    monkeypatch.setattr(sesame, "redact", lambda t, *a: old_redact(re.sub(r"QQSECRET\d+", "[REDACTED:test]", t or ""), *a))
    monkeypatch.setattr(sesame, "TEXT_VERSION", sesame.TEXT_VERSION + 1)
    run(capsys, "index")
    text, _ = index_bytes(tmp_path)
    assert "QQSECRET" not in text and text.count("[REDACTED:test]") == 2
    assert search_ids(capsys, "okapi") == ["gone-1"] and search_ids(capsys, "zebra") == ["live-1"]


def test_secrets_never_reach_the_index_and_the_words_around_them_stay_searchable(env, tmp_path, capsys):
    w = PiWriter(env, "leaky-1")
    w.user("deploy with OPENAI_API_KEY=%s to the marmoset cluster" % SECRET)
    w.tool("bash", {"command": "curl -H 'Authorization: Bearer abcdef0123456789abcdef' https://api"}, "ok tapir")
    w.save()
    assert search_ids(capsys, "marmoset cluster") == ["leaky-1"]
    assert search_ids(capsys, "tapir", "--tools") == ["leaky-1"]
    texts, raw = index_bytes(tmp_path)
    assert SECRET not in texts and SECRET.encode() not in raw and "abcdef0123456789abcdef" not in texts
    assert "OPENAI_API_KEY=[REDACTED:secret]" in texts or "[REDACTED:openai_key]" in texts
    assert search_ids(capsys, SECRET) == []


def test_groq_keys_and_telegram_bot_tokens_are_in_no_output_and_not_in_the_index(env, tmp_path, capsys):
    # Both seen verbatim in real Kimi sessions: the key pasted bare, the token in a bot URL.
    w = PiWriter(env, "leaky-3")
    w.user("use %s for the capybara summaries" % GROQ)
    w.tool("bash", {"command": "curl https://api.telegram.org/bot%s/getMe" % TELEGRAM}, "ok capybara bot")
    w.save()
    for argv in (("search", "capybara"), ("search", "capybara", "--json"), ("show", "leaky-3"),
                 ("show", "leaky-3", "--json", "--max-chars", "0")):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "capybara" in out
        assert GROQ not in out and TELEGRAM not in out and "AAFq3kZ" not in out
    texts, raw = index_bytes(tmp_path)
    for secret in (GROQ, TELEGRAM):
        assert secret not in texts and secret.encode() not in raw
    assert "[REDACTED:groq_key]" in texts and "/bot[REDACTED:telegram_token]/getMe" in texts


def test_redaction_can_be_switched_off_and_the_index_follows(env, tmp_path, capsys):
    PiWriter(env, "leaky-2").user("the key is %s for the quokka service" % SECRET).save()
    run(capsys, "index")
    assert SECRET not in index_bytes(tmp_path)[0]
    write_config({"sources": [{"parser": "pi", "path": str(env)}], "redact": False}, tmp_path)
    run(capsys, "index")  # the setting changed: the whole index is rebuilt without redaction
    assert SECRET in index_bytes(tmp_path)[0]
    write_config({"sources": [{"parser": "pi", "path": str(env)}], "redact": "yes"}, tmp_path)
    code, _, err = run(capsys, "index")
    assert code == 1 and '"redact" must be true or false' in err


def test_exclude_keeps_matching_files_and_projects_out(corpus, tmp_path, capsys):
    write_config({"sources": [{"parser": "pi", "path": str(corpus)}],
                  "exclude": ["/home/dev/billing", "*--home-dev-site--*"]}, tmp_path)
    assert search_ids(capsys, "currency") == []                          # by the session's cwd
    assert search_ids(capsys, "carousel") == []                          # by the file's path
    assert search_ids(capsys, "ECONNREFUSED") == ["cccc3333-ci"]         # the rest stays
    write_config({"sources": [{"parser": "pi", "path": str(corpus)}]}, tmp_path)
    assert search_ids(capsys, "currency") == ["eeee5555-billing"]       # and comes back when removed


def test_forget_removes_a_session_keeps_it_out_and_can_be_undone(corpus, tmp_path, capsys):
    code, out, _ = run(capsys, "forget", "bbbb2222", "--json")
    assert code == 0 and json.loads(out)["forgotten"]["sessionId"] == "bbbb2222-carousel"
    assert search_ids(capsys, "carousel") == []
    run(capsys, "index", "--full")
    assert search_ids(capsys, "carousel") == []                          # kept out, also after a rebuild
    assert stat.S_IMODE(os.stat(tmp_path / "data" / "forgotten.json").st_mode) == 0o600
    code, out, _ = run(capsys, "forget", "--list", "--json")
    assert [i["sessionId"] for i in json.loads(out)["forgotten"]] == ["bbbb2222-carousel"]
    code, out, _ = run(capsys, "forget", "--undo", "bbbb2222-carousel")
    assert code == 0 and "will index again" in out
    assert search_ids(capsys, "carousel") == ["bbbb2222-carousel"]
    code, _, err = run(capsys, "forget", "no-such-session")
    assert code == 1 and "no session matches" in err


# ==================================================================================================
# Agent parsers: one block per agent section of sesame.py. Each pins that agent's traps with small
# literal files written here, then checks every file of ../shared/samples/<agent> when present.
# ==================================================================================================

# -------------------------------------------------------------------------------------------------
# pi parser
# -------------------------------------------------------------------------------------------------

def parse(path):
    report = sesame.ParseReport()
    sessions = sesame.PARSERS["pi"].parse(str(path), report)
    return sessions, report


def test_pi_header_gives_id_and_cwd_and_latest_session_info_is_the_name(tmp_path):
    w = PiWriter(tmp_path, "s-1", cwd="/home/dev/my-app")  # folder name is lossy: never decoded
    w.user("hello").entry("session_info", name="First").entry("session_info", name="Second")
    w.entry("session_info", name="  ")
    (s,), report = parse(w.save())
    assert (s.session_id, s.cwd, s.name, s.agent) == ("s-1", "/home/dev/my-app", "Second", "pi")
    assert s.created == "2026-03-10T09:00:00.000Z"


def test_pi_tool_call_is_one_chunk_with_arguments_and_joined_result(tmp_path):
    w = PiWriter(tmp_path, "s-2")
    w.assistant("Running tests.", calls=[("c1", "bash", {"command": "npm test"})])
    w.result("c1", "bash", "3 passing")
    (s,), _ = parse(w.save())
    tools = [c for c in s.chunks if c.kind == "tool"]
    assert len(tools) == 1
    assert tools[0].text == "tool: bash\ncommand: npm test\noutput:\n3 passing"
    assert [c.kind for c in s.chunks] == ["assistant", "tool"]


@pytest.mark.parametrize("agent", ["pi", "openclaw"])
def test_pi_tool_calls_are_joined_by_the_toolkits_rule(tmp_path, agent):
    """pi's and OpenClaw's calls are joined by ToolCalls, as every agent's whose chunks are added
    while the file is read: a call id given twice is one call, and a result whose call is unknown
    is a chunk of its own only when it says something."""
    w = PiWriter(tmp_path, "s-join")
    w.assistant("Running tests.", calls=[("c1", "bash", {"command": "npm test"})])
    w.assistant(calls=[("c1", "bash", {"command": "npm test"})])   # the same call again
    w.result("c1", "bash", "3 passing")
    w.result("gone-1", "read", "")                                   # an unknown call, nothing said
    w.result("gone-2", "read", "the file's text")
    [s] = parse_file(agent, w.save())
    assert texts(s, "tool") == ["tool: bash\ncommand: npm test\noutput:\n3 passing", "tool: read\noutput:\nthe file's text"]


def test_pi_bash_execution_compaction_branch_summary_and_custom_messages_are_chunks(tmp_path):
    w = PiWriter(tmp_path, "s-3")
    w.entry("message", message={"role": "bashExecution", "command": "git status", "output": " M a.py",
                                "exitCode": 0, "timestamp": 1})
    w.entry("compaction", summary="Compacted goal text", firstKeptEntryId="x", tokensBefore=1)
    w.entry("branch_summary", fromId="x", summary="Branch explored a screenshot")
    w.entry("custom_message", customType="reminder", content="Keep output stable", display=True)
    w.entry("custom", customType="state", data={"secret": "not indexed"})
    w.entry("label", targetId="x", label="plan")
    (s,), report = parse(w.save())
    kinds = [(c.kind, c.text.split("\n")[0]) for c in s.chunks]
    assert kinds == [("tool", "tool: bash"), ("summary", "Compacted goal text"),
                     ("summary", "Branch explored a screenshot"), ("custom", "Keep output stable")]
    assert report.skipped_lines == 0


def test_pi_images_are_never_indexed_and_thinking_is_its_own_kind(tmp_path):
    w = PiWriter(tmp_path, "s-4")
    w.entry("message", message={"role": "user", "content": [
        {"type": "text", "text": "look at this"}, {"type": "image", "data": "iVBORw0KGgoAAAANSUhEUg", "mimeType": "image/png"}]})
    w.assistant("A chart.", thinking="The user wants analysis.")
    (s,), _ = parse(w.save())
    assert not any("iVBORw0KGgo" in c.text for c in s.chunks)
    assert [c.kind for c in s.chunks] == ["user", "thinking", "assistant"]


def test_pi_malformed_and_unfinished_lines_are_skipped_and_counted(tmp_path):
    w = PiWriter(tmp_path, "s-5")
    w.user("first message")
    path = w.save(extra='{"type": "message", broken\n[1, 2]\n\xff\xfe\n{"type":"message","message":{"role":"user","content":"unfinished')
    (s,), report = parse(path)
    assert [c.text for c in s.chunks] == ["first message"]
    assert report.skipped == {"malformed line": 3, "unfinished last line": 1}


def test_pi_v1_and_v2_files_are_read(tmp_path):
    w = PiWriter(tmp_path, "v1-session", version=1)
    w.user("legacy words")
    w.entry("compaction", summary="old summary", firstKeptEntryIndex=1, tokensBefore=5)
    (s,), _ = parse(w.save())
    assert [c.text for c in s.chunks] == ["legacy words", "old summary"]
    w2 = PiWriter(tmp_path, "v2-session", version=2)
    w2.entry("message", message={"role": "hookMessage", "customType": "x", "content": "hook text", "display": True})
    (s2,), _ = parse(w2.save())
    assert [(c.kind, c.text) for c in s2.chunks] == [("custom", "hook text")]


def test_pi_huge_tool_output_keeps_head_and_tail_and_says_what_was_dropped(tmp_path):
    w = PiWriter(tmp_path, "s-6")
    w.tool("bash", {"command": "make"}, "HEADWORD " + "x" * 100000 + " TAILWORD")
    (s,), _ = parse(w.save())
    text = s.chunks[0].text
    assert "HEADWORD" in text and "TAILWORD" in text and "characters dropped" in text
    assert len(text) < sesame.TOOL_OUTPUT_CAP + 500


def test_pi_session_metadata_is_indexed_with_the_name_and_changes_are_picked_up(env, capsys):
    w = PiWriter(env, "meta-1")
    w.user("refactor the module")
    w.save()
    PiWriter(env, "meta-2").user("the okapi enclosure").entry("session_info", name="Own name").save()
    meta_dir = env.parent / "sessions-meta"  # beside the sessions folder, as pi keeps it
    meta_dir.mkdir()

    def write_meta(sid, **meta):
        (meta_dir / (sid + ".meta.json")).write_text(json.dumps(meta))
    write_meta("meta-1", name="Billing cleanup", description="split the invoice module",
               summary="Moved invoice rendering into its own package.", tags=["platypus", "billing"])
    write_meta("meta-2", name="Meta name loses to the session's own", tags=["okapi"])
    write_config({"sources": [{"parser": "pi", "path": str(env)}]}, env.parent)
    code, out, _ = run(capsys, "search", "platypus", "--json")
    r = json.loads(out)["results"]
    assert [x["sessionId"] for x in r] == ["meta-1"] and r[0]["name"] == "Billing cleanup"
    assert search_ids(capsys, "invoice rendering package")[0] == "meta-1"
    assert json.loads(run(capsys, "search", "okapi", "--json")[1])["results"][0]["name"] == "Own name"
    code, out, _ = run(capsys, "show", "meta-1", "--json")
    assert json.loads(out)["session"]["summary"] == "Moved invoice rendering into its own package."
    write_meta("meta-1", name="Billing cleanup", tags=["echidna"])  # the metadata changed, the session did not
    assert search_ids(capsys, "echidna") == ["meta-1"] and search_ids(capsys, "platypus") == []


def test_matched_words_are_what_matched_not_what_looks_like_a_highlight(env, capsys):
    PiWriter(env, "kw-1").user("pass options as **kwargs to the okapi loader").save()
    r = json.loads(run(capsys, "search", "okapi", "--json", "--fields", "full")[1])["results"][0]
    assert r["matchedWords"] == ["okapi"]


def test_after_a_parser_upgrade_searches_go_back_to_the_quick_refresh(env, capsys, monkeypatch):
    # A new Sesame whose parser version changed makes the next refresh look at every file; once that
    # found nothing to read, the records must say so, or every search would stat every file forever.
    path = PiWriter(env, "upg-1").user("the narwhal tusk").save()
    for p in (path, os.path.dirname(path), str(env)):   # an old history: folders not touched for long
        os.utime(p, (1.7e9, 1.7e9))
    run(capsys, "index")
    monkeypatch.setattr(PARSERS["crush"], "version", PARSERS["crush"].version + 100)   # no Crush files here
    calls = []
    real = sesame.plan_full
    monkeypatch.setattr(sesame, "plan_full", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert search_ids(capsys, "narwhal") == ["upg-1"]
    assert search_ids(capsys, "narwhal") == ["upg-1"]
    assert search_ids(capsys, "narwhal") == ["upg-1"]
    assert len(calls) == 1   # the first search after the upgrade only


def test_a_sessions_meta_folder_created_after_a_long_running_process_started_is_read(env, capsys):
    # `watch` and `mcp` live for days: what a parser learnt about folders lasts one index run only.
    PiWriter(env, "late-1").user("refactor the module").save()
    run(capsys, "index")
    assert search_ids(capsys, "wombat") == []
    meta_dir = env.parent / "sessions-meta"
    meta_dir.mkdir()
    (meta_dir / "late-1.meta.json").write_text(json.dumps({"name": "Wombat burrow", "tags": ["wombat"]}))
    run(capsys, "index")
    assert search_ids(capsys, "wombat") == ["late-1"]


def test_every_parser_finds_its_home_through_the_environment_it_is_given(tmp_path):
    # Discovery under an explicit environment (tests, `HOME=... sesame`, a service) must not fall
    # back to the process's own home folder.
    home = str(tmp_path / "someone")
    for pid, parser in PARSERS.items():
        for root in parser.default_roots({"HOME": home}):
            assert str(root).startswith(home), (pid, root)
    assert PARSERS["claude"].default_roots({"HOME": home, "CLAUDE_CONFIG_DIR": "~/cc"}) == [os.path.join(home, "cc", "projects")]


def test_a_file_without_pi_header_is_reported_not_indexed(env, capsys):
    (env / "notes.jsonl").write_text('{"hello": "world"}\n')
    code, out, err = run(capsys, "index", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["filesSkipped"] == 1
    assert "not a pi session file" in summary["skipped"][0]["reason"]


def test_modified_is_last_user_or_assistant_message_time(tmp_path):
    w = PiWriter(tmp_path, "s-7")
    w.user("a")
    w.entry("message", message={"role": "assistant", "content": [{"type": "text", "text": "b"}],
                                "timestamp": 1773140000000})
    (s,), _ = parse(w.save())
    assert s.modified == sesame.norm_time(1773140000000)


# -------------------------------------------------------------------------------------------------
# Claude Code
# -------------------------------------------------------------------------------------------------

cc_SID = "11111111-2222-4333-8444-555555555555"


def cc_cl(rtype, uuid, ts, **kw):
    rec = {"type": rtype, "uuid": uuid, "sessionId": cc_SID, "cwd": "/home/u/proj", "isSidechain": False,
           "timestamp": ts, "version": "2.1.14"}
    rec.update(kw)
    return rec


def cc_cl_user(uuid, ts, content, **kw):
    return cc_cl("user", uuid, ts, message={"role": "user", "content": content}, **kw)


def cc_cl_asst(uuid, ts, mid, blocks, **kw):
    return cc_cl("assistant", uuid, ts, message={"id": mid, "role": "assistant", "content": blocks}, **kw)


def test_claude_session_id_cwd_times_and_kinds(tmp_path):
    p = write_jsonl(tmp_path / "-home-u-proj" / (cc_SID + ".jsonl"), [
        {"type": "queue-operation", "operation": "dequeue", "sessionId": cc_SID, "timestamp": "2026-01-21T06:19:38.000Z"},
        cc_cl_user("u1", "2026-01-21T06:19:38.056Z", "why does the flux capacitor leak?"),
        cc_cl_asst("a1", "2026-01-21T06:19:40.000Z", "msg_1", [{"type": "thinking", "thinking": "hmm, capacitors"}]),
        cc_cl_asst("a2", "2026-01-21T06:19:41.000Z", "msg_1", [{"type": "text", "text": "Because of the seal."}]),
    ])
    [s] = parse_file("claude", p)
    assert s.session_id == cc_SID and s.cwd == "/home/u/proj" and s.parent is None and s.name is None
    assert s.created == "2026-01-21T06:19:38.000Z" and s.modified == "2026-01-21T06:19:41.000Z"
    assert kinds(s) == ["user", "thinking", "assistant"]


def test_claude_line_with_a_byte_that_is_not_utf8_keeps_its_words(tmp_path):
    # A Latin-1 "é" pasted into a prompt and written as it came: the line is read, the byte becomes U+FFFD.
    p = write_jsonl(tmp_path / (cc_SID + ".jsonl"), [cc_cl_user("u1", "2026-01-01T00:00:00Z", "first prompt")])
    with open(p, "ab") as f:
        f.write(json.dumps(cc_cl_user("u2", "2026-01-01T00:00:01Z", "the caf\u00e9 menu parser")).encode("ascii")
                .replace(b"\\u00e9", b"\xe9") + b"\n")
    [s] = parse_file("claude", p)
    assert texts(s, "user") == ["first prompt", "the caf\ufffd menu parser"]


def test_claude_streamed_message_is_merged_and_indexed_once(tmp_path):
    # One API message written over several lines (one block per line, one line repeating a block).
    p = write_jsonl(tmp_path / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "list files"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "msg_9", [{"type": "text", "text": "Listing."}]),
        cc_cl_asst("a2", "2026-01-01T00:00:01Z", "msg_9", [{"type": "text", "text": "Listing."},
                                                          {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                           "input": {"command": "ls -la"}}]),
        cc_cl_asst("a3", "2026-01-01T00:00:01Z", "msg_9", [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                          "input": {"command": "ls -la"}}]),
        cc_cl_user("u2", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                 "content": "README.md\nsetup.py"}],
                toolUseResult={"stdout": "README.md\nsetup.py", "stderr": ""}),
    ])
    [s] = parse_file("claude", p)
    assert kinds(s) == ["user", "assistant", "tool"]
    assert texts(s, "assistant") == ["Listing."]
    tool = [c for c in s.chunks if c.kind == "tool"][0]
    assert tool.tool == "Bash" and "command: ls -la" in tool.text and "setup.py" in tool.text


def test_sesames_own_output_in_a_session_that_called_it_is_not_indexed_again(env, tmp_path, capsys):
    """A session that looked something up with Sesame (its MCP tools, or the command through a shell
    tool, as the skill does) holds copies of other sessions in those outputs. They are left out (the
    calls stay): the session found comes first alone for its words, and a forgotten one's words are
    not found through a copy. Other tools' output, and Sesame's errors, stay searchable."""
    root = tmp_path / "claude-projects"
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    original, reader = "aaaaaaaa-2222-4333-8444-555555555555", "bbbbbbbb-2222-4333-8444-555555555555"
    write_jsonl(root / "-home-u-proj" / (original + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "the okapi migration fails on the orders table", sessionId=original),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "Fixed the okapi migration."}],
                   sessionId=original)])
    copy = "okapi migration fails on the orders table. Fixed the okapi migration."

    def call(n, name, args, output, error=False):
        return [cc_cl_asst("a%d" % n, "2026-01-02T00:00:%02dZ" % n, "m%d" % n, [
                    {"type": "tool_use", "id": "toolu_%d" % n, "name": name, "input": args}], sessionId=reader),
                cc_cl_user("r%d" % n, "2026-01-02T00:00:%02dZ" % n, [
                    {"type": "tool_result", "tool_use_id": "toolu_%d" % n, "content": output, "is_error": error}],
                    sessionId=reader)]
    write_jsonl(root / "-home-u-other" / (reader + ".jsonl"), [
        cc_cl_user("u1", "2026-01-02T00:00:00Z", "find where we fixed the zanzibar thing", sessionId=reader)]
        + call(1, "mcp_sesame_search", {"query": "orders table"}, "1. aaaaaaaa  " + copy)   # (Gemini CLI's name)
        + call(2, "mcp__sesame__show", {"session": "aaaaaaaa"}, copy)
        + call(3, "exec_command", {"cmd": "sesame search 'okapi' --json | head -50"}, '{"results": ["%s"]}' % copy)
        + call(4, "Bash", {"command": "cat notes.txt"}, "capybara notes about the okapi")
        + call(5, "Bash", {"command": "sesame show nosuch"}, "sesame: no session matches 'walrusid'", error=True))
    run(capsys, "index")
    assert search_ids(capsys, "okapi migration")[0] == original and search_ids(capsys, "migration") == [original]
    assert search_ids(capsys, "orders table") == [original, reader]   # (the reader asked for them)
    assert search_ids(capsys, "capybara notes") == [reader] and search_ids(capsys, "walrusid") == [reader]
    chunks = json.loads(run(capsys, "show", reader, "--tools", "--json", "--max-chars", "0")[1])["chunks"]
    tools = [c["text"] for c in chunks if c["kind"] == "tool"]
    assert len(tools) == 5 and "query: orders table" in tools[0] and "session: aaaaaaaa" in tools[1]
    assert all(sesame.own_output("shell", {"command": c}) for c in (["bash", "-lc", "sesame show x"], "sesame status"))
    assert not any(sesame.own_output("shell", {"command": c}) for c in ("sesame show x; ls", "sesame index", "cat sesame.py"))
    assert all("Sesame's own output, %d characters" % n in t for t, n in zip(tools, (len(copy) + 13, len(copy))))
    assert "Sesame's own output" in tools[2] and "migration" not in tools[1] + tools[2]
    run(capsys, "forget", original)
    assert search_ids(capsys, "migration") == [] and search_ids(capsys, "fails") == []


def test_line_numbers_of_a_file_read_back_and_the_clis_reminders_are_not_words(env, tmp_path, capsys):
    """Claude Code's Read (and cat -n, OpenCode's read) number every line: those numbers are left out
    where they run 1, 2, 3..., so a search for a number finds where it was said, not every long file
    read. The lines stay, and numbers that do not run in sequence (a table) stay. The reminder the
    CLI appends to every read is left out too."""
    root = tmp_path / "claude-projects"
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    reader, talker = "aaaaaaaa-2222-4333-8444-555555555555", "bbbbbbbb-2222-4333-8444-555555555555"
    listing = "".join("%6d→line of the walrus module %s\n" % (n, "ocelot" if n == 1480 else "") for n in range(1, 1501))
    # (as Claude Code 2.x appends to every Read: the CLI's reminder, no word of the file's)
    listing += "\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered malware.\n</system-reminder>\n"
    table = "7\tpelican\n1234\tcapybara\n3\theron\n"   # (ids, not line numbers)
    write_jsonl(root / "-p" / (reader + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "read the walrus module", sessionId=reader),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/p/walrus.py"}},
            {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "cut -f1,2 ids.tsv"}}], sessionId=reader),
        cc_cl_user("u2", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": "t1", "content": listing},
                                                {"type": "tool_result", "tool_use_id": "t2", "content": table}],
                   sessionId=reader)])
    write_jsonl(root / "-p" / (talker + ".jsonl"), [
        cc_cl_user("u1", "2026-01-02T00:00:00Z", "the build fails at step 1455", sessionId=talker)])
    run(capsys, "index")
    assert search_ids(capsys, "1455") == [talker]   # (line 1455 of the file read is no word)
    assert search_ids(capsys, "ocelot") == [reader] and search_ids(capsys, "1234") == [reader]
    assert search_ids(capsys, "malware") == []
    chunks = json.loads(run(capsys, "show", reader, "--tools", "--json", "--max-chars", "0")[1])["chunks"]
    read, cut = [c["text"] for c in chunks if c["kind"] == "tool"]
    assert read.split("output:\n", 1)[1].startswith("line of the walrus module \nline of the walrus module")
    assert cut.endswith(table.strip())


def test_claude_compaction_summary_is_kept_without_the_clis_sentences_around_it(tmp_path):
    # What Claude Code 2.1 writes around the summary the model wrote (78 of 79 summaries of the
    # real-world corpus): its words were in the talk column of every compacted session.
    inner = "Summary:\n1. Primary Request and Intent: fix the okapi scheduler.\n9. Optional Next Step: run the tests."
    framed = ("This session is being continued from a previous conversation that ran out of context. The summary "
              "below covers the earlier portion of the conversation.\n\n" + inner + "\n\nIf you need specific details "
              "from before compaction (like exact code snippets, error messages, or content you generated), read the "
              "full transcript at: /home/u/.claude/projects/-p/x.jsonl\nContinue the conversation from where it left "
              "off without asking the user any further questions. Resume directly.")
    p = write_jsonl(tmp_path / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "fix the okapi scheduler"),
        cc_cl_user("s1", "2026-01-01T05:00:00Z", framed, isCompactSummary=True),
        cc_cl_user("s2", "2026-01-01T06:00:00Z", "A summary without the frame.", isCompactSummary=True)])
    [s] = parse_file("claude", p)
    assert texts(s, "summary") == [inner, "A summary without the frame."]


def test_claude_injected_text_is_context_never_user(tmp_path):
    p = write_jsonl(tmp_path / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z",
                "<local-command-caveat>Caveat: The messages below were generated by the user while running "
                "local commands. DO NOT respond.</local-command-caveat>", isMeta=True),
        cc_cl_user("u2", "2026-01-01T00:00:01Z",
                "<command-name>/review</command-name>\n<command-message>review</command-message>\n"
                "<command-args>the parser module</command-args>"),
        cc_cl_user("u3", "2026-01-01T00:00:02Z", "<local-command-stdout>Set model to opus</local-command-stdout>"),
        cc_cl_user("u4", "2026-01-01T00:00:03Z", [
            {"type": "text", "text": "<system-reminder>The TodoWrite tool was not used</system-reminder>"},
            {"type": "text", "text": "please fix the zebra bug"}]),
        cc_cl_user("u5", "2026-01-01T00:00:04Z", "Stop hook feedback: run the tests", isMeta=True),
        cc_cl_user("u6", "2026-01-01T00:00:05Z", "[Request interrupted by user]"),
    ])
    [s] = parse_file("claude", p)
    users = texts(s, "user")
    assert users == ["/review the parser module", "please fix the zebra bug"]
    context = " ".join(texts(s, "context"))
    for injected in ("Caveat", "Set model to opus", "TodoWrite", "Stop hook feedback", "Request interrupted"):
        assert injected in context and not any(injected in u for u in users)


def test_claude_title_precedence_rename_then_ai_title_then_own_summary(tmp_path):
    base = [cc_cl_user("u1", "2026-01-01T00:00:00Z", "hello")]
    p = write_jsonl(tmp_path / "a" / (cc_SID + ".jsonl"), base + [
        {"type": "summary", "summary": "Summary of another session", "leafUuid": "elsewhere"},
        {"type": "summary", "summary": "Greeting exchange", "leafUuid": "u1"},
    ])
    assert parse_file("claude", p)[0].name == "Greeting exchange"
    p = write_jsonl(tmp_path / "b" / (cc_SID + ".jsonl"), base + [
        {"type": "summary", "summary": "Greeting exchange", "leafUuid": "u1"},
        {"type": "ai-title", "sessionId": cc_SID, "aiTitle": "Generated title"},
    ])
    assert parse_file("claude", p)[0].name == "Generated title"
    p = write_jsonl(tmp_path / "c" / (cc_SID + ".jsonl"), base + [
        {"type": "custom-title", "sessionId": cc_SID, "customTitle": "My rename"},
        {"type": "ai-title", "sessionId": cc_SID, "aiTitle": "Generated title"},
    ])
    assert parse_file("claude", p)[0].name == "My rename"
    p = write_jsonl(tmp_path / "d" / (cc_SID + ".jsonl"), base + [
        {"type": "summary", "summary": "Summary of another session", "leafUuid": "elsewhere"}])
    assert parse_file("claude", p)[0].name is None


def cc_pelican_project(tmp_path):
    """A Claude Code projects folder with one session (cc_SID) whose last message is "a1": (root, its folder)."""
    root = tmp_path / "claude-projects"
    proj = root / "-proj"
    write_jsonl(proj / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "tune the pelican cache"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "Tuned."}])])
    return root, proj


def test_claude_summary_in_another_file_names_the_session_holding_its_leaf(env, tmp_path, capsys):
    # Claude Code 1.0-2.0 wrote summaries of earlier sessions as the first lines of the next session
    # file of the folder; started and left without a prompt, that file holds nothing else.
    root, proj = cc_pelican_project(tmp_path)
    other = cc_SID.replace("5555", "6666")
    write_jsonl(proj / (other + ".jsonl"), [
        {"type": "summary", "summary": "Pelican cache tuning", "leafUuid": "a1"},
        cc_cl_user("o1", "2026-01-02T00:00:00Z", "rename the heron module", sessionId=other)])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    code, out, _ = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["skipped"] == []
    code, out, _ = run(capsys, "search", "pelican", "--json")
    [hit] = json.loads(out)["results"]
    assert hit["sessionId"] == cc_SID and hit["name"] == "Pelican cache tuning"
    # A newer file of summaries alone renames it at the next index; it is no session itself.
    time.sleep(0.01)
    only = cc_SID.replace("5555", "7777")
    write_jsonl(proj / (only + ".jsonl"), [
        {"type": "summary", "summary": "Pelican cache eviction tuned", "leafUuid": "a1"},
        {"type": "summary", "summary": "Heron module renamed", "leafUuid": "o1"}])
    code, out, _ = run(capsys, "index", "--json")
    [skipped] = json.loads(out)["skipped"]
    assert only in skipped["path"] and "only summaries naming other sessions" in skipped["reason"]
    code, out, _ = run(capsys, "search", "pelican OR heron", "--json")
    names = {r["sessionId"]: r["name"] for r in json.loads(out)["results"]}
    assert names == {cc_SID: "Pelican cache eviction tuned", other: "Heron module renamed"}
    # The session's own rename still comes first.
    with open(str(proj / (cc_SID + ".jsonl")), "a") as f:
        f.write(json.dumps({"type": "custom-title", "sessionId": cc_SID, "customTitle": "my pelican"}) + "\n")
    code, out, _ = run(capsys, "search", "pelican", "--json")
    assert json.loads(out)["results"][0]["name"] == "my pelican"


def test_claude_summary_written_into_a_file_of_a_folder_seen_before_renames_at_the_next_search(env, tmp_path, capsys):
    # What a scan of a project folder found is kept beside the index until the folder's time changes
    # (a search does not look at every file of a busy folder again): a summary file created later,
    # and one created empty whose summaries were written after the scan, still rename the session.
    root, proj = cc_pelican_project(tmp_path)
    for n in range(30):   # other sessions of the folder
        sid = cc_SID.replace("5555", "%04d" % n)
        write_jsonl(proj / (sid + ".jsonl"), [cc_cl_user("x%d" % n, "2026-01-01T00:00:00Z", "other work %d" % n, sessionId=sid)])
    empty = proj / (cc_SID.replace("5555", "8888") + ".jsonl")
    empty.write_text("")
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    assert run(capsys, "index")[0] == 0
    hour_ago = time.time() - 3600
    os.utime(str(proj), (hour_ago, hour_ago))   # the folder was scanned; nothing created since
    assert search_json(capsys, "pelican")["results"][0]["name"] is None
    assert (tmp_path / "data" / "claude-summary-files").exists()
    # The empty file gets its summaries (an append: the folder's time does not change).
    empty.write_text(json.dumps({"type": "summary", "summary": "Pelican cache tuning", "leafUuid": "a1"}) + "\n")
    os.utime(str(proj), (hour_ago, hour_ago))
    assert search_json(capsys, "pelican")["results"][0]["name"] == "Pelican cache tuning"
    # A new file of summaries (the folder's time changes): scanned again.
    time.sleep(0.01)
    write_jsonl(proj / (cc_SID.replace("5555", "7777") + ".jsonl"), [
        {"type": "summary", "summary": "Pelican cache eviction tuned", "leafUuid": "a1"}])
    assert search_json(capsys, "pelican")["results"][0]["name"] == "Pelican cache eviction tuned"
    # The kept list damaged (a crash, a hand edit) is only a list to make again.
    for junk in ("[1, 2", '{"%s": [1, ["/etc/passwd"], 3]}' % proj, '{"%s": "x"}' % proj):
        (tmp_path / "data" / "claude-summary-files").write_text(junk)
        os.utime(str(proj), (hour_ago, hour_ago))
        assert search_json(capsys, "pelican")["results"][0]["name"] == "Pelican cache eviction tuned"


def test_claude_subagent_is_its_own_session_pointing_to_parent(tmp_path):
    p = write_jsonl(tmp_path / "-proj" / cc_SID / "subagents" / "agent-a0ad4f.jsonl", [
        cc_cl_user("c1", "2026-01-01T00:00:02Z", "Search the repo for TODO comments", isSidechain=True, agentId="a0ad4f"),
        cc_cl_asst("c2", "2026-01-01T00:00:03Z", "msg_c", [{"type": "text", "text": "Found 3."}], isSidechain=True,
                agentId="a0ad4f"),
    ])
    [s] = parse_file("claude", p)
    assert s.session_id == "agent-a0ad4f" and s.parent == cc_SID
    assert texts(s, "user") == ["Search the repo for TODO comments"]
    assert PARSERS["claude"].resume_command({"session_id": s.session_id, "cwd": s.cwd, "path": p}) is None
    assert p in PARSERS["claude"].list_files(str(tmp_path))


def test_claude_compaction_and_side_question_replays_rank_after_their_parent(env, tmp_path, capsys):
    # /compact and side questions run as sub-agents whose files replay the parent's records (same
    # uuids) before their own prompt; a query for the parent's words must find the parent first.
    root = tmp_path / "claude-projects"
    talk = [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "why does the marmalade scheduler starve the quokka workers?"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "The marmalade scheduler pins "
                                                                                "quokka workers to one queue."}]),
        cc_cl_asst("a2", "2026-01-01T00:00:02Z", "m1", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                       "input": {"command": "grep -rn quokka sched/"}}]),
        cc_cl_user("u2", "2026-01-01T00:00:03Z", [{"type": "tool_result", "tool_use_id": "t1",
                                                  "content": "sched/marmalade.py:12: quokka"}]),
    ]
    summary = "Summary: the marmalade scheduler starved quokka workers; quokka queues pinned (zanzibar)."
    write_jsonl(root / "-proj" / (cc_SID + ".jsonl"), talk + [   # the parent keeps the summary it was given
        cc_cl_user("s1", "2026-01-01T05:00:10Z", "This session is being continued from a previous conversation. "
                   + summary, isCompactSummary=True)])
    side = dict(isSidechain=True, agentId="acompact-77aa")
    write_jsonl(root / "-proj" / cc_SID / "subagents" / "agent-acompact-77aa.jsonl", [dict(r, **side) for r in talk] + [
        cc_cl_user("c1", "2026-01-01T05:00:00Z", "Your task is to create a detailed summary of the conversation "
                                                 "so far.", **side),
        cc_cl_asst("c2", "2026-01-01T05:00:09Z", "m9", [{"type": "text", "text": summary}], **side),
    ])
    write_jsonl(root / "-proj" / cc_SID / "subagents" / "agent-aside_question-88bb.jsonl",
                [dict(r, **side) for r in talk] + [
        cc_cl_user("q1", "2026-01-01T06:00:00Z", "<system-reminder>This is a side question from the user.</system-"
                                                 "reminder>\n\nwhich file holds the marmalade quokka queue?", **side),
        cc_cl_asst("q2", "2026-01-01T06:00:03Z", "m8", [{"type": "text", "text": "sched/marmalade.py (walrus)."}],
                   **side)])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    for query in ("quokka", "marmalade quokka workers", "quokka queues pinned zanzibar"):
        assert search_ids(capsys, query)[0] == cc_SID
    # what the sub-agents produced stays theirs; the replayed part is not theirs. The compaction's
    # summary is in the parent too: the compaction keeps it as context only, so it holds no
    # conversation of its own and is no search result (see CONVERSATION_KINDS); `show` still opens it
    assert search_ids(capsys, "zanzibar") == [cc_SID]
    assert search_ids(capsys, "walrus") == ["agent-aside_question-88bb"]
    [s] = parse_file("claude", root / "-proj" / cc_SID / "subagents" / "agent-acompact-77aa.jsonl")
    assert kinds(s) == ["context", "context"] and s.created == "2026-01-01T05:00:00.000Z"
    [s] = parse_file("claude", root / "-proj" / cc_SID / "subagents" / "agent-aside_question-88bb.jsonl")
    assert texts(s, "user") == ["which file holds the marmalade quokka queue?"]


def test_claude_2_0_warmup_sidechain_is_context_not_the_conversations_start(tmp_path):
    # 2.0.x opens each session with a sidechain "Warmup" prompt to its sub-agents and the model's
    # boilerplate answer, before anything the user typed.
    warm = dict(isSidechain=True)
    p = write_jsonl(tmp_path / "-proj" / (cc_SID + ".jsonl"), [
        dict(cc_cl_user("w1", "2025-10-17T01:33:38Z", "Warmup", **warm), parentUuid=None),
        dict(cc_cl_asst("w2", "2025-10-17T01:33:40Z", "m0", [{"type": "text", "text": "I'm Claude Code, ready to "
                                                              "help you navigate the codebase."}], **warm), parentUuid="w1"),
        dict(cc_cl_user("u1", "2025-10-17T01:34:00Z", "draw the swarm diagram"), parentUuid=None),
        dict(cc_cl_asst("a1", "2025-10-17T01:34:05Z", "m1", [{"type": "text", "text": "Here it is."}]), parentUuid="u1"),
        dict(cc_cl_user("s1", "2025-10-17T01:34:06Z", "explore the agents folder", **warm), parentUuid="a1"),
    ])
    [s] = parse_file("claude", p)
    assert [(c.kind, c.text) for c in s.chunks] == [
        ("context", "Warmup"), ("context", "I'm Claude Code, ready to help you navigate the codebase."),
        ("user", "draw the swarm diagram"), ("assistant", "Here it is."), ("custom", "explore the agents folder")]
    alone = write_jsonl(tmp_path / "-proj" / "22222222-2222-4333-8444-555555555555.jsonl", [
        dict(cc_cl_user("w1", "2025-10-17T01:33:38Z", "Warmup", **warm), parentUuid=None),
        dict(cc_cl_asst("w2", "2025-10-17T01:33:40Z", "m0", [{"type": "text", "text": "Ready."}], **warm), parentUuid="w1")])
    with pytest.raises(NotASessionFile):   # started, warmed up, left without a prompt
        parse_file("claude", alone)


def test_a_session_file_only_touched_or_grown_without_text_keeps_its_ranking_parts(env, tmp_path, capsys):
    # A history restored from a backup (every file dated now) or a line without text (a progress
    # record) changes nothing that is ranked: the session's parts are not indexed again (that took as
    # long as indexing it anew: 5.1 s per 100 MB of touched files, 0.7 s now). Text still is.
    root = tmp_path / "claude-projects"
    path = write_jsonl(root / "-proj" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "set up the ocelot relay"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "Relay configured."}])])
    other = cc_SID.replace("5555", "6666")
    write_jsonl(root / "-proj" / (other + ".jsonl"), [cc_cl_user("o1", "2026-01-02T00:00:00Z", "a later session",
                                                                 sessionId=other)])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    run(capsys, "index")

    def parts():
        con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
        try:
            return con.execute("SELECT id, first_seq, last_seq FROM docs ORDER BY id").fetchall()
        finally:
            con.close()
    before = parts()
    later = time.time() + 60
    os.utime(str(path), (later, later))
    assert "1 indexed" in "".join(run(capsys, "index")[1:]) and parts() == before
    with open(str(path), "a") as f:
        f.write(json.dumps({"type": "progress", "sessionId": cc_SID, "uuid": "p1", "timestamp": "2026-01-01T00:00:02Z",
                            "data": {"type": "hook_progress"}}) + "\n")
    run(capsys, "index")
    assert parts() == before and search_ids(capsys, "ocelot") == [cc_SID]
    with open(str(path), "a") as f:
        f.write(json.dumps(cc_cl_user("u2", "2026-01-01T00:00:03Z", "now the capybara schema")) + "\n")
    run(capsys, "index")
    assert parts() != before and search_ids(capsys, "capybara") == [cc_SID] and search_ids(capsys, "ocelot") == [cc_SID]


def test_claude_appends_are_read_from_the_last_stop_and_match_a_full_rebuild_a_rewrite_is_read_whole(
        env, tmp_path, capsys, monkeypatch):
    root = tmp_path / "claude-projects"
    path = write_jsonl(root / "-proj" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "set up the ocelot relay"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "Relay configured."}])])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    run(capsys, "index")
    name = os.path.basename(path)
    starts = read_starts(monkeypatch)

    def append(*records, tail=""):
        with open(path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records) + tail)
        run(capsys, "index")
        return os.path.getsize(path)
    clean = os.path.getsize(path)
    result = json.dumps(cc_cl_user("u2", "2026-01-01T00:00:04Z", [{"type": "tool_result", "tool_use_id": "t1",
                                                                  "content": "migrated the capybara schema"}]))
    # A streamed message whose tool call waits for its result, and the result's line half written.
    a2 = cc_cl_asst("a2", "2026-01-01T00:00:02Z", "m2", [{"type": "text", "text": "Running the ocelot migrations."}])
    append(a2,
           cc_cl_asst("a3", "2026-01-01T00:00:03Z", "m2", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                          "input": {"command": "alembic upgrade head"}}]),
           tail=result[:40])
    assert search_ids(capsys, "alembic") == [cc_SID]
    # The rest of the line; the message goes on after the result, repeating a block; a rename.
    after_result = append(tail=result[40:] + "\n")
    append(cc_cl_asst("a4", "2026-01-01T00:00:05Z", "m2", [{"type": "text", "text": "Running the ocelot migrations."},
                                                          {"type": "text", "text": "Done: the capybara is fine."}]),
           {"type": "custom-title", "sessionId": cc_SID, "customTitle": "ocelot relay setup"})
    # Each read goes on from the last line after which nothing waited (here: not the tool call).
    assert starts == [(name, clean), (name, clean + len(json.dumps(a2)) + 1), (name, after_result)]
    code, out, _ = run(capsys, "show", cc_SID, "--json", "--max-chars", "0")
    shown = json.loads(out)
    assert shown["session"]["name"] == "ocelot relay setup"
    assert sum("Running the ocelot migrations." in c["text"] for c in shown["chunks"]) == 1
    assert search_ids(capsys, "capybara schema", "--tool", "bash") == [cc_SID]  # the result joined its call
    queries = ("ocelot", "capybara", "alembic upgrade", "relay setup")
    appended = index_snapshot(capsys, queries)
    run(capsys, "index", "--full")
    assert index_snapshot(capsys, queries) == appended
    assert run(capsys, "show", cc_SID, "--json", "--max-chars", "0")[1] == out
    # A rewrite (shorter, another word) is read from the start.
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace("ocelot relay\"", "puma relay\""))
    del starts[:]
    run(capsys, "index")
    assert starts == [(name, 0)]
    assert search_ids(capsys, "puma") == [cc_SID]


def test_a_claude_call_left_without_its_result_holds_back_appends_only_until_the_next_prompt(
        env, tmp_path, capsys, monkeypatch):
    """A plan the user went back before (its ExitPlanMode call never answered, the next prompt
    continuing from the message before it, as in real sessions): a later append is read from the
    last line, not from the call; an inlined sub-agent's prompt does not end its Task call's wait."""
    root = tmp_path / "claude-projects"
    plan = cc_cl_asst("a2", "2026-01-01T00:00:02Z", "m2", [{"type": "tool_use", "id": "t1", "name": "ExitPlanMode",
                                                           "input": {"plan": "migrate the narwhal tables"}}],
                      parentUuid="a1")
    path = write_jsonl(root / "-proj" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "plan the narwhal migration"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "Let me look."}], parentUuid="u1"),
        plan,
        cc_cl_user("u2", "2026-01-01T00:00:03Z", "no, keep the walrus tables first", parentUuid="a1"),
        cc_cl_asst("a3", "2026-01-01T00:00:04Z", "m3", [{"type": "tool_use", "id": "t2", "name": "Task",
                                                       "input": {"prompt": "survey the walrus tables"}}], parentUuid="u2"),
        cc_cl_user("s1", "2026-01-01T00:00:05Z", "survey the walrus tables", isSidechain=True),
        cc_cl_asst("s2", "2026-01-01T00:00:06Z", "s", [{"type": "text", "text": "Surveyed."}], isSidechain=True),
        cc_cl_user("u3", "2026-01-01T00:00:07Z", [{"type": "tool_result", "tool_use_id": "t2",
                                                   "content": "the walrus tables hold 12 columns"}], parentUuid="a3")])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    run(capsys, "index")
    starts = read_starts(monkeypatch)
    clean = os.path.getsize(path)
    with open(path, "a") as f:
        f.write(json.dumps(cc_cl_asst("a4", "2026-01-01T00:00:08Z", "m4", [{"type": "text", "text": "The beluga view is next."}],
                                      parentUuid="u3")) + "\n")
    run(capsys, "index")
    assert starts == [(os.path.basename(path), clean)]   # (not from the plan's call: 0 before)
    assert search_ids(capsys, "beluga") == search_ids(capsys, "narwhal tables", "--tool", "ExitPlanMode") == [cc_SID]
    assert search_ids(capsys, "12 columns", "--tool", "task") == [cc_SID]   # (the Task call got its result)
    queries = ("narwhal", "walrus columns", "beluga", "survey")
    appended = index_snapshot(capsys, queries)
    run(capsys, "index", "--full")
    assert index_snapshot(capsys, queries) == appended


def test_claude_spilled_tool_output_is_read_from_tool_results(tmp_path):
    proj = tmp_path / "-proj"
    spill = proj / cc_SID / "tool-results" / "toolu_big.txt"
    os.makedirs(str(spill.parent))
    spill.write_text("line\n" * 10 + "UNIQUE_NEEDLE_IN_BIG_OUTPUT\n")
    stub = ("<persisted-output>\nOutput too large (2MB). Full output saved to: %s\n\nPreview (first 2KB):\nline\n"
            "</persisted-output>" % spill)
    p = write_jsonl(proj / (cc_SID + ".jsonl"), [
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "tool_use", "id": "toolu_big", "name": "Bash",
                                                       "input": {"command": "make test"}}]),
        cc_cl_user("u1", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": "toolu_big", "content": stub}]),
    ])
    [s] = parse_file("claude", p)
    assert "UNIQUE_NEEDLE_IN_BIG_OUTPUT" in texts(s, "tool")[0]


def test_claude_spill_written_on_another_machine_is_found_in_this_session_folder(tmp_path):
    # Claude Code 2.1 names the spill at random and records the absolute path of the machine that
    # wrote it; the session folder was synced here from elsewhere.
    proj = tmp_path / "-proj"
    spill = proj / cc_SID / "tool-results" / "bgkptfuro.txt"
    os.makedirs(str(spill.parent))
    spill.write_text("line-number-1\n" * 10 + "SYNCED_SPILL_NEEDLE\n")
    elsewhere = "/Users/someone/.claude/projects/-proj/%s/tool-results/bgkptfuro.txt" % cc_SID
    stub = ("<persisted-output>\nOutput too large (516.5KB). Full output saved to: %s\n\nPreview (first 2KB):\n"
            "line-number-1\n...\n</persisted-output>" % elsewhere)
    p = write_jsonl(proj / (cc_SID + ".jsonl"), [
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "tool_use", "id": "toolu_f048", "name": "Bash",
                                                       "input": {"command": "seq 1 30000 | sed s/^/line-number-/"}}]),
        cc_cl_user("u1", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": "toolu_f048", "content": stub,
                                                  "is_error": False}],
                   toolUseResult={"stdout": "line-number-1\n", "stderr": "", "interrupted": False,
                                  "persistedOutputPath": elsewhere, "persistedOutputSize": 528894}),
    ])
    assert "SYNCED_SPILL_NEEDLE" in texts(parse_file("claude", p)[0], "tool")[0]
    windows = "C:\\Users\\someone\\.claude\\projects\\-proj\\%s\\tool-results\\bgkptfuro.txt" % cc_SID
    p = write_jsonl(proj / (cc_SID + ".jsonl"), [
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "tool_use", "id": "toolu_f048", "name": "Bash",
                                                       "input": {"command": "make"}}]),
        cc_cl_user("u1", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": "toolu_f048",
                                                  "content": "<persisted-output>preview</persisted-output>"}],
                   toolUseResult={"stdout": "preview", "persistedOutputPath": windows}),
    ])
    assert "SYNCED_SPILL_NEEDLE" in texts(parse_file("claude", p)[0], "tool")[0]


def cc_truncated_failure(command, call_id="toolu_big_fail"):
    """A failed Bash call whose output Claude Code 2.1 cut itself: 5,000 characters from each end."""
    out = "".join("%d\n" % i for i in range(1, 9001))
    text = "Exit code 4\n%s\n\n... [%d characters truncated] ...\n\n%s" % (out[:5000], len(out) - 10000, out[-5000:])
    return [
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "tool_use", "id": call_id, "name": "Bash",
                                                       "input": {"command": command,
                                                                 "description": "Run the checks"}}]),
        cc_cl_user("u1", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": call_id, "content": text,
                                                  "is_error": True}], toolUseResult="Error: " + text),
    ]


def test_claude_truncated_failure_is_an_error_found_by_its_command_under_tools(env, tmp_path, capsys):
    root = tmp_path / "claude-projects"
    write_jsonl(root / "-proj" / (cc_SID + ".jsonl"),
                   [cc_cl_user("u0", "2026-01-01T00:00:00Z", "check the build")] + cc_truncated_failure(
                       "npm run build-assets; exit 4"))
    other = cc_SID.replace("1111", "9999")
    write_jsonl(root / "-other" / (other + ".jsonl"), [
        cc_cl_user("u0", "2026-01-01T00:00:00Z", "the build of the assets is slow", sessionId=other)])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    assert search_ids(capsys, "build-assets", "--tools") == [cc_SID]
    assert search_ids(capsys, "build-assets", "--tool", "bash") == [cc_SID]
    [tool] = [c for c in PARSERS["claude"].parse(str(root / "-proj" / (cc_SID + ".jsonl")), ParseReport())[0].chunks
              if c.kind == "tool"]
    assert tool.text.startswith("tool: Bash\ncommand: npm run build-assets; exit 4\ndescription: Run the checks\nerror:")


def test_claude_shell_failure_named_only_by_its_exit_code_is_an_error(tmp_path):
    lines = cc_truncated_failure("pytest -x")
    lines[1]["message"]["content"][0]["is_error"] = False      # SDK writers leave it false
    ok = [cc_cl_asst("a2", "2026-01-01T00:00:03Z", "m2", [{"type": "tool_use", "id": "t_ok", "name": "Bash",
                                                          "input": {"command": "echo Exit code 3"}}]),
          cc_cl_user("u2", "2026-01-01T00:00:04Z", [{"type": "tool_result", "tool_use_id": "t_ok",
                                                    "content": "Exit code 3"}],
                     toolUseResult={"stdout": "Exit code 3", "stderr": ""})]
    zero = [cc_cl_asst("a3", "2026-01-01T00:00:05Z", "m3", [{"type": "tool_use", "id": "t_z", "name": "Bash",
                                                            "input": {"command": "true"}}]),
            cc_cl_user("u3", "2026-01-01T00:00:06Z", [{"type": "tool_result", "tool_use_id": "t_z",
                                                      "content": "Exit code 0"}])]
    [s] = parse_file("claude", write_jsonl(tmp_path / (cc_SID + ".jsonl"), lines + ok + zero))
    failed, echoed, zeroed = texts(s, "tool")
    assert "\nerror:\nExit code 4" in failed and "\nerror:" not in zeroed
    # a command that printed the words succeeded: its structured result holds what it printed
    assert "\noutput:\nExit code 3" in echoed


def test_claude_compact_summary_resumed_copy_and_bad_lines(tmp_path):
    line = cc_cl_user("u1", "2026-01-01T00:00:00Z", "port the parser to rust")
    p = write_jsonl(tmp_path / (cc_SID + ".jsonl"), [
        line, "{not json", line,   # a resumed file repeats earlier lines with their uuids
        cc_cl_user("u2", "2026-01-01T00:00:05Z", "This session is being continued from a previous conversation...",
                isCompactSummary=True),
    ], raw_tail='{"type": "user", "unfinished')
    report = ParseReport()
    [s] = PARSERS["claude"].parse(p, report)
    assert texts(s, "user") == ["port the parser to rust"]
    assert texts(s, "summary") and report.skipped_lines == 2


def test_oh_my_opencode_transcripts_are_read_as_their_own_agent_and_appends_resume(env, tmp_path, capsys, monkeypatch):
    # oh-my-opencode's Claude Code hooks: prompts and tool calls of an OpenCode session, no assistant
    # text; it puts env exports before a bash command between the call and its result.
    home = pathlib.Path(os.environ["HOME"])
    assert PARSERS["omo"].default_roots({"HOME": "/h"}) == ["/h/.claude/transcripts"]
    path = write_jsonl(home / ".claude" / "transcripts" / "ses_25f7abcdTUKCsb.jsonl", [
        {"type": "user", "timestamp": "2026-04-18T12:23:35.762Z", "content": "review the walrus paper draft"},
        {"type": "tool_use", "timestamp": "2026-04-18T12:23:46.068Z", "tool_name": "bash",
         "tool_input": {"command": "find papers/ -name '*walrus*'", "description": "Find the paper"}},
        {"type": "tool_use", "timestamp": "2026-04-18T12:23:46.070Z", "tool_name": "glob",
         "tool_input": {"pattern": "**/*.tex"}},
        {"type": "tool_result", "timestamp": "2026-04-18T12:23:46.210Z", "tool_name": "glob",
         "tool_input": {"pattern": "**/*.tex"}, "tool_output": {"output": "papers/narwhal.tex"}},
        {"type": "tool_result", "timestamp": "2026-04-18T12:23:46.300Z", "tool_name": "bash",
         "tool_input": {"command": "export CI=true; find papers/ -name '*walrus*'"},
         "tool_output": {"output": "papers/inbox/walrus_budget.tex"}},
    ])
    write_config({"sources": [{"parser": "omo", "path": str(home / ".claude" / "transcripts")}]}, tmp_path)
    code, out, _ = run(capsys, "search", "walrus_budget", "--tool", "bash", "--json")
    [hit] = json.loads(out)["results"]
    assert hit["sessionId"] == "ses_25f7abcdTUKCsb" and hit["source"] == "omo" and hit["resumeCommand"] is None
    assert search_ids(capsys, "narwhal", "--tool", "glob") == ["ses_25f7abcdTUKCsb"]
    starts = read_starts(monkeypatch)
    size = os.path.getsize(path)
    with open(path, "a") as f:
        f.write(json.dumps({"type": "user", "timestamp": "2026-04-18T12:30:00.000Z", "content": "now the otter "
                                                                                                 "section"}) + "\n")
    assert search_ids(capsys, "otter") == ["ses_25f7abcdTUKCsb"]
    assert starts == [(os.path.basename(path), size)]
    [s] = parse_file("omo", path)
    assert kinds(s) == ["user", "tool", "tool", "user"] and s.modified == "2026-04-18T12:30:00.000Z"
    assert "command: find papers/ -name '*walrus*'" in texts(s, "tool")[0]


def test_claude_resume_command_runs_in_the_session_cwd():
    cmd = PARSERS["claude"].resume_command({"session_id": cc_SID, "cwd": "/home/u/my proj", "path": "x"})
    assert cmd == "cd '/home/u/my proj' && claude --resume %s" % cc_SID


@pytest.mark.parametrize("agent,command", [("qwen", "qwen --resume"), ("opencode", "opencode -s")])
def test_qwen_and_opencode_resume_a_session_from_its_own_folder(env, capsys, tmp_path, agent, command):
    """Both look a session up from the folder they run in (run elsewhere, Qwen Code 0.15-0.24 says no
    session has that id and OpenCode 1.18 hangs): the command goes there first; without a folder,
    or for a sub-agent, there is none."""
    if agent == "qwen":
        write_jsonl(tmp_path / "home" / ".qwen" / "projects" / "-home-u-my-proj" / "chats" / "7799410a.jsonl", [
            dict(ot_q("u1", None, "user", message={"role": "user", "parts": [{"text": "the lynx build"}]}),
                 sessionId="7799410a", cwd="/home/u/my proj")])
        write_config({"sources": [{"parser": "qwen", "path": str(tmp_path / "home" / ".qwen" / "projects")}]}, tmp_path)
        sid = "7799410a"
        word, cwd = "lynx", "'/home/u/my proj'"
    else:   # ses_b in /home/u/proj, and its sub-agent's session ses_c
        sid, word, cwd = "ses_b", "flake", "/home/u/proj"
        ogc_opencode_db(tmp_path / "home" / ".local" / "share" / "opencode" / "opencode.db")
        write_config({"sources": [{"parser": "opencode", "path": str(tmp_path / "home" / ".local" / "share" / "opencode")}]},
                     tmp_path)
        assert run(capsys, "index")[0] == 0
        code, out, _ = run(capsys, "search", "child prompt", "--json")
        assert [(r["sessionId"], r["resumeCommand"]) for r in json.loads(out)["results"]] == [("ses_c", None)]
    assert run(capsys, "index")[0] == 0
    code, out, _ = run(capsys, "search", word, "--json")
    assert [r["resumeCommand"] for r in json.loads(out)["results"]] == ["cd %s && %s %s" % (cwd, command, sid)]
    parser = PARSERS[agent]
    assert parser.resume_command({"session_id": sid, "cwd": None, "parent": None}) is None
    assert parser.resume_command({"session_id": sid, "cwd": "/home/u", "parent": "ses_parent"}) is None


def test_claude_rejects_other_formats(tmp_path):
    p = write_jsonl(tmp_path / "x.jsonl", [{"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta",
                                            "payload": {"id": "abc"}}])
    with pytest.raises(NotASessionFile):
        parse_file("claude", p)
    p = write_jsonl(tmp_path / "y.jsonl", ["[1, 2]"])
    with pytest.raises(NotASessionFile):
        parse_file("claude", p)


def test_claude_default_roots_honour_config_dir():
    roots = PARSERS["claude"].default_roots({"CLAUDE_CONFIG_DIR": "/a/claude,/b/claude"})
    assert roots == ["/a/claude/projects", "/b/claude/projects"]


# -------------------------------------------------------------------------------------------------
# Codex
# -------------------------------------------------------------------------------------------------

cc_TID = "019a93b9-f380-7600-98ff-940e6b99603c"


def cc_cx(ts, rtype, payload):
    return {"timestamp": ts, "type": rtype, "payload": payload}


def cc_cx_meta(tid=cc_TID, ts="2025-11-17T21:30:28.608Z", **kw):
    p = {"id": tid, "timestamp": ts, "cwd": "/home/u/app", "originator": "codex_cli_rs", "cli_version": "0.58.0",
         "source": "cli", "instructions": "AGENTS.md text"}
    p.update(kw)
    return cc_cx(ts, "session_meta", p)


def cc_cx_msg(ts, role, text):
    kind = "output_text" if role == "assistant" else "input_text"
    return cc_cx(ts, "response_item", {"type": "message", "role": role, "content": [{"type": kind, "text": text}]})


def cc_rollout(tmp_path, name=cc_TID):
    return tmp_path / "sessions" / "2025" / "11" / "17" / ("rollout-2025-11-17T15-30-28-%s.jsonl" % name)


def test_codex_prompt_sent_in_several_parts_is_one_user_text_and_image_tags_are_not_words(tmp_path):
    # A client may send one prompt as several text parts (project notes, then what was typed): the
    # event stream writes their concatenation. Each part used to be a user chunk of its own, and the
    # concatenation a third. The tags Codex puts around an attached image are no one's words.
    notes = "This is a Phoenix web application.\n\n## Project guidelines\n- run mix precommit\n"
    typed = "should the ledger use event sourcing or an audit table?"
    p = write_jsonl(cc_rollout(tmp_path), [
        cc_cx_meta(),
        cc_cx("2026-02-13T18:40:51.000Z", "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": notes}, {"type": "input_text", "text": typed}]}),
        cc_cx("2026-02-13T18:40:51.000Z", "event_msg", {"type": "user_message", "message": notes + typed, "images": []}),
        cc_cx_msg("2026-02-13T18:40:55.000Z", "assistant", "an audit table"),
        cc_cx("2026-02-13T18:41:00.000Z", "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<image name=[Image #1]>"}, {"type": "input_image", "image_url": "data:"},
            {"type": "input_text", "text": "</image>"}, {"type": "input_text", "text": "read [Image #1] please"}]}),
        cc_cx("2026-02-13T18:41:00.000Z", "event_msg", {"type": "user_message", "message": "read [Image #1] please",
                                                      "images": [], "local_images": ["/tmp/shot.png"]}),
    ])
    [s] = parse_file("codex", p)
    assert texts(s, "user") == [notes + typed, "read [Image #1] please"]
    # a file that writes its prompts in one stream only: the parts are still one text
    p = write_jsonl(cc_rollout(tmp_path, "one-stream"), [
        cc_cx_meta(tid="one-stream"),
        cc_cx("2026-02-13T18:40:51.000Z", "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": notes}, {"type": "input_text", "text": typed}]}),
    ])
    [s] = parse_file("codex", p)
    assert texts(s, "user") == [notes + "\n" + typed]


def test_codex_wrapped_streams_are_indexed_once_and_context_is_not_user(tmp_path):
    p = write_jsonl(cc_rollout(tmp_path), [
        cc_cx_meta(),
        cc_cx_msg("2025-11-17T21:30:29.000Z", "developer", "<permissions instructions>sandbox</permissions instructions>"),
        cc_cx_msg("2025-11-17T21:30:29.100Z", "user", "<environment_context>\n  <cwd>/home/u/app</cwd>\n</environment_context>"),
        cc_cx_msg("2025-11-17T21:30:29.200Z", "user", "# AGENTS.md instructions for /home/u/app\n\nbe terse"),
        cc_cx("2025-11-17T21:30:30.000Z", "event_msg", {"type": "user_message", "message": "wire lmstudio in", "images": []}),
        cc_cx_msg("2025-11-17T21:30:30.000Z", "user", "wire lmstudio in"),
        cc_cx("2025-11-17T21:30:31.000Z", "response_item", {"type": "reasoning", "summary": [
            {"type": "summary_text", "text": "**Planning inspection**"}], "encrypted_content": "gAAAA"}),
        cc_cx("2025-11-17T21:30:31.000Z", "event_msg", {"type": "agent_reasoning", "text": "**Planning inspection**"}),
        cc_cx("2025-11-17T21:30:32.000Z", "response_item", {"type": "function_call", "name": "shell", "call_id": "call_1",
                                                          "arguments": json.dumps({"command": ["bash", "-lc", "ls"]})}),
        cc_cx("2025-11-17T21:30:33.000Z", "response_item", {"type": "function_call_output", "call_id": "call_1",
                                                          "output": json.dumps({"output": "README.md\n",
                                                                                "metadata": {"exit_code": 0}})}),
        cc_cx_msg("2025-11-17T21:30:34.000Z", "assistant", "Done wiring."),
        cc_cx("2025-11-17T21:30:34.000Z", "event_msg", {"type": "agent_message", "message": "Done wiring."}),
        cc_cx("2025-11-17T21:30:35.000Z", "event_msg", {"type": "token_count", "info": None}),
    ])
    [s] = parse_file("codex", p)
    assert s.session_id == cc_TID and s.cwd == "/home/u/app" and s.parent is None
    assert s.created == "2025-11-17T21:30:28.608Z" and s.modified == "2025-11-17T21:30:35.000Z"
    assert texts(s, "user") == ["wire lmstudio in"]
    assert texts(s, "assistant") == ["Done wiring."] and texts(s, "thinking") == ["**Planning inspection**"]
    assert len(texts(s, "context")) == 2 and not any("AGENTS.md" in t for t in texts(s, "user"))
    assert not any("permissions" in c.text for c in s.chunks)   # (Codex's own instructions to the model)
    [tool] = [c for c in s.chunks if c.kind == "tool"]
    assert tool.text == "tool: shell\ncommand: ls\noutput:\nREADME.md"


def test_codex_response_items_without_events_still_give_user_text(tmp_path):
    p = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta(), cc_cx_msg("2025-11-17T21:31:00Z", "user", "only in response items")])
    assert texts(parse_file("codex", p)[0], "user") == ["only in response items"]


def test_codex_bare_era_header_and_cwd_from_environment_context(tmp_path):
    p = write_jsonl(tmp_path / "sessions" / ("rollout-2025-08-01-%s.jsonl" % cc_TID), [
        {"id": cc_TID, "timestamp": "2025-08-01T10:00:00.000Z", "instructions": None, "git": {"branch": "main"}},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n<cwd>/srv/old</cwd>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "bump the version"}]},
        {"type": "function_call", "name": "shell", "arguments": "{\"command\": [\"git\", \"tag\"]}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "v1.0"},
        {"record_type": "state"},
    ])
    [s] = parse_file("codex", p)
    assert s.session_id == cc_TID and s.cwd == "/srv/old" and s.created == "2025-08-01T10:00:00.000Z"
    assert kinds(s) == ["context", "user", "tool"] and "v1.0" in texts(s, "tool")[0]


def test_codex_typescript_era_json(tmp_path):
    p = tmp_path / "sessions" / "rollout-2025-04-20-abc.json"
    os.makedirs(str(p.parent))
    p.write_text(json.dumps({"session": {"id": "ts-era-1", "timestamp": "2025-04-20T09:00:00Z",
                                         "instructions": "always use tabs"},
                             "items": [{"type": "message", "role": "user",
                                        "content": [{"type": "input_text", "text": "add a cli flag"}]},
                                       {"type": "message", "role": "assistant",
                                        "content": [{"type": "output_text", "text": "Added --verbose."}]}]}))
    [s] = parse_file("codex", p)
    assert s.session_id == "ts-era-1" and s.created == "2025-04-20T09:00:00.000Z"
    assert texts(s, "user") == ["add a cli flag"] and texts(s, "context") == ["always use tabs"]
    assert str(p) in PARSERS["codex"].list_files(str(tmp_path / "sessions"))


def test_codex_thread_name_from_session_index_last_entry_wins(tmp_path):
    p = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta(), cc_cx("2025-11-17T21:31:00Z", "event_msg",
                                                      {"type": "thread_name_updated", "thread_name": "in-file name"})])
    assert parse_file("codex", p)[0].name == "in-file name"
    write_jsonl(tmp_path / "session_index.jsonl", [
        {"id": cc_TID, "thread_name": "first name", "updated_at": "2025-11-17T21:35:00Z"},
        {"id": "other", "thread_name": "not mine", "updated_at": "2025-11-17T21:36:00Z"},
        {"id": cc_TID, "thread_name": "LM Studio wiring", "updated_at": "2025-11-17T21:37:00Z"},
    ])
    assert parse_file("codex", p)[0].name == "LM Studio wiring"


def test_codex_state_db_rename_and_changed_title_name_the_session_and_the_newest_wins(tmp_path):
    # Codex 0.169 keeps threads in state_5.sqlite: `title` starts as the first prompt (not a name),
    # a /rename sets `name` (and appends to session_index.jsonl), the desktop app changes `title`.
    p = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta(), cc_cx_msg("2025-11-17T21:31:00Z", "user", "wire lmstudio in")])
    con = sqlite3.connect(str(tmp_path / "state_5.sqlite"))
    con.execute("CREATE TABLE threads (id TEXT PRIMARY KEY, rollout_path TEXT NOT NULL, title TEXT NOT NULL, "
                "first_user_message TEXT NOT NULL DEFAULT '', name TEXT, updated_at INTEGER NOT NULL, "
                "updated_at_ms INTEGER)")
    con.execute("INSERT INTO threads VALUES (?, ?, 'wire lmstudio in', 'wire lmstudio in', NULL, 1763415060, "
                "1763415060000)", (cc_TID, str(p)))
    con.commit()
    assert parse_file("codex", p)[0].name is None
    con.execute("UPDATE threads SET title = 'LM Studio provider'")
    con.commit()
    assert parse_file("codex", p)[0].name == "LM Studio provider"
    con.execute("UPDATE threads SET name = 'Local models'")
    con.commit()
    assert parse_file("codex", p)[0].name == "Local models"
    write_jsonl(tmp_path / "session_index.jsonl", [
        {"id": cc_TID, "thread_name": "older rename", "updated_at": "2025-11-17T21:00:00Z"}])
    assert parse_file("codex", p)[0].name == "Local models"
    write_jsonl(tmp_path / "session_index.jsonl", [
        {"id": cc_TID, "thread_name": "newer rename", "updated_at": "2025-11-17T22:00:00Z"}])
    assert parse_file("codex", p)[0].name == "newer rename"
    con.close()


def cc_cx_exec(ts, call_id, cmd, output, exit_code):
    """What Codex 0.169 writes for one exec_command: the call, the item_completed event, the output."""
    return [
        cc_cx(ts, "response_item", {"type": "function_call", "name": "exec_command", "call_id": call_id,
                                    "arguments": json.dumps({"cmd": cmd})}),
        cc_cx(ts, "event_msg", {"type": "item_completed", "item": {
            "type": "CommandExecution", "id": call_id, "command": ["/bin/bash", "-lc", cmd],
            "status": "failed" if exit_code else "completed", "aggregated_output": output, "exit_code": exit_code}}),
        cc_cx(ts, "response_item", {"type": "function_call_output", "call_id": call_id, "output":
                                    "Chunk ID: 9e7052\nWall time: 0.0000 seconds\nProcess exited with code %d\n"
                                    "Original token count: 2\nOutput:\n%s" % (exit_code, output)}),
    ]


def test_codex_failed_exec_command_is_an_error_from_its_exit_code(tmp_path):
    p = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta(cli_version="0.169.0")]
                       + cc_cx_exec("2025-11-17T21:31:00Z", "call_ok", "echo canary-1 && ls", "canary-1\n", 0)
                       + cc_cx_exec("2025-11-17T21:31:01Z", "call_bad", "echo fail-x; exit 3", "fail-x\n", 3))
    ok, bad = [c for c in parse_file("codex", p)[0].chunks if c.kind == "tool"]
    assert ok.tool == bad.tool == "exec_command"
    assert ok.text.startswith("tool: exec_command\ncmd: echo canary-1 && ls\noutput:") and "\nerror:" not in ok.text
    assert bad.text.startswith("tool: exec_command\ncmd: echo fail-x; exit 3\nerror:")
    # the output text alone says it too (no event), and so does an older exec_command_end event
    lines = [r for r in cc_cx_exec("2025-11-17T21:31:01Z", "c2", "false", "", 1) if r["type"] == "response_item"]
    p2 = write_jsonl(cc_rollout(tmp_path, "other"), [cc_cx_meta()] + lines)
    assert "\nerror:" in parse_file("codex", p2)[0].chunks[-1].text
    p3 = write_jsonl(cc_rollout(tmp_path, "older"), [
        cc_cx_meta(),
        cc_cx("2025-11-17T21:31:00Z", "response_item", {"type": "function_call", "name": "shell", "call_id": "c3",
                                                      "arguments": json.dumps({"command": ["bash", "-lc", "make"]})}),
        cc_cx("2025-11-17T21:31:01Z", "event_msg", {"type": "exec_command_end", "call_id": "c3", "exit_code": 2}),
        cc_cx("2025-11-17T21:31:01Z", "response_item", {"type": "function_call_output", "call_id": "c3",
                                                      "output": "make: *** No rule"}),
    ])
    assert "\nerror:" in parse_file("codex", p3)[0].chunks[-1].text
    # The header before an output is the harness's, alike in every output: left out, a failure said
    # as Claude Code says it. The shell tool's era wrote "Exit code: N" first (130 failed commands of
    # the real-world corpus read as succeeded).
    assert ok.text.endswith("output:\ncanary-1") and bad.text.endswith("error:\nExit code 3\nfail-x")
    p4 = write_jsonl(cc_rollout(tmp_path, "shell-era"), [cc_cx_meta()] + [r for n, (code, out) in enumerate(
        [(1, "fatal: Unable to create index.lock"), (0, "On branch main"), (2, "")]) for r in (
        cc_cx("2025-11-17T21:31:0%dZ" % n, "response_item", {"type": "function_call", "name": "shell_command", "call_id": "s%d" % n,
                                                          "arguments": json.dumps({"command": "git status"})}),
        cc_cx("2025-11-17T21:31:0%dZ" % n, "response_item", {"type": "function_call_output", "call_id": "s%d" % n,
              "output": "Exit code: %d\nWall time: 0.8 seconds\nTotal output lines: 1\nOutput:\n%s" % (code, out)}))])
    texts = [c.text.split("\n", 2)[2] for c in parse_file("codex", p4)[0].chunks if c.kind == "tool"]
    assert texts == ["error:\nExit code 1\nfatal: Unable to create index.lock", "output:\nOn branch main", "error:\nExit code 2"]


def test_codex_exec_command_is_found_with_tool_bash(env, tmp_path, capsys):
    home = tmp_path / "codex"
    write_jsonl(home / "sessions" / "2025" / "11" / "17" / ("rollout-2025-11-17T15-30-28-%s.jsonl" % cc_TID),
                   [cc_cx_meta()] + cc_cx_exec("2025-11-17T21:31:00Z", "c1", "cargo build-std", "ok", 0))
    write_config({"sources": [{"parser": "codex", "path": str(home / "sessions")}]}, tmp_path)
    assert search_ids(capsys, "build-std", "--tool", "bash") == [cc_TID]


def test_codex_mcp_calls_are_named_with_their_server_and_sesames_own_output_is_left_out(tmp_path):
    # Codex 0.169 offers an MCP server's tools as a namespace and records a call as {"namespace":
    # "mcp__sesame", "name": "search"} (recorded with the real CLI and Sesame's server).
    def mcp(ts, call_id, namespace, name, args, output):
        return [cc_cx(ts, "response_item", {"type": "function_call", "namespace": namespace, "name": name,
                                            "arguments": json.dumps(args), "call_id": call_id}),
                cc_cx(ts, "response_item", {"type": "function_call_output", "call_id": call_id,
                                            "output": "Wall time: 0.0127 seconds\nOutput:\n" + output})]
    p = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta(), cc_cx_msg("2025-11-17T21:31:00Z", "user", "find the okapi thing")]
                    + mcp("2025-11-17T21:31:01Z", "c1", "mcp__sesame", "search", {"query": "okapi"},
                          '{"results": [{"snippet": "the okapi migration fails"}]}')
                    + mcp("2025-11-17T21:31:02Z", "c2", "mcp__github", "search_issues", {"q": "okapi"}, "issue 12: okapi cache"))
    [s] = parse_file("codex", p)
    tools = [(c.tool, c.text) for c in s.chunks if c.kind == "tool"]
    assert [t for t, _ in tools] == ["mcp__sesame__search", "mcp__github__search_issues"]
    assert "query: okapi" in tools[0][1] and "Sesame's own output" in tools[0][1] and "migration" not in tools[0][1]
    assert "issue 12: okapi cache" in tools[1][1]


def test_codex_subagent_links_parent_and_drops_replayed_history(tmp_path):
    parent = "0199a000-0000-7000-8000-000000000002"
    child = "0199a001-0000-7000-8000-00000000c41d"
    p = write_jsonl(cc_rollout(tmp_path, child), [
        cc_cx_meta(child, "2026-10-05T00:02:00.100Z", forked_from_id=parent,
                source={"subagent": {"thread_spawn": {"parent_thread_id": parent, "depth": 1}}}),
        # replayed parent history, written in the creation burst
        cc_cx_meta(parent, "2026-10-05T00:02:00.101Z"),
        cc_cx_msg("2026-10-05T00:02:00.102Z", "developer", "<permissions instructions>parent</permissions instructions>"),
        cc_cx("2026-10-05T00:02:00.103Z", "event_msg", {"type": "user_message", "message": "parent prompt xyzzy"}),
        cc_cx_msg("2026-10-05T00:02:00.104Z", "assistant", "parent answer xyzzy"),
        # the child's own initial context, then its own work
        cc_cx_msg("2026-10-05T00:02:00.105Z", "developer", "<permissions instructions>child</permissions instructions>"),
        cc_cx("2026-10-05T00:02:02.000Z", "event_msg", {"type": "user_message", "message": "Update the dependency pins"}),
        cc_cx_msg("2026-10-05T00:02:30.000Z", "assistant", "Updated the pins."),
    ])
    [s] = parse_file("codex", p)
    assert s.session_id == child and s.parent == parent
    assert texts(s, "user") == ["Update the dependency pins"] and texts(s, "assistant") == ["Updated the pins."]
    assert not any("xyzzy" in c.text for c in s.chunks)


def test_codex_subagent_without_replayed_history_keeps_its_work(tmp_path):
    p = os.path.join(SAMPLES, "codex", "ccrider-subagent_v2.jsonl")
    if not os.path.exists(p):
        pytest.skip("samples absent")
    [s] = parse_file("codex", p)
    assert s.parent == "0199a000-0000-7000-8000-000000000002"
    assert texts(s, "user") == ["Update the dependency pins"]


def test_codex_zstd_rollouts_are_read_with_what_the_machine_has_or_reported(tmp_path, monkeypatch):
    import importlib
    plain = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta(), cc_cx_msg("2025-11-17T21:31:00Z", "user", "compressed hello")])
    z = plain + ".zst"
    data = open(plain, "rb").read()
    module, exe = sesame._zstd_module(), shutil.which("zstd")
    if module is None and exe is None:
        pytest.skip("neither compression.zstd (Python 3.14+) nor the zstd command to compress the fixture with")
    packed = module.compress(data) if module else subprocess.run([exe, "-c", "-q"], input=data, stdout=subprocess.PIPE,
                                                                 check=True).stdout
    with open(z, "wb") as f:
        f.write(packed)
    # a plain file beside its .zst wins; the .zst alone is listed
    assert PARSERS["codex"].list_files(str(tmp_path / "sessions")) == [plain]
    os.remove(plain)
    assert PARSERS["codex"].list_files(str(tmp_path / "sessions")) == [z]
    assert texts(parse_file("codex", z)[0], "user") == ["compressed hello"]
    if exe:   # the zstd command alone (Python before 3.14) reads it too
        monkeypatch.setattr(sesame, "_zstd_module", lambda: None)
        assert texts(parse_file("codex", z)[0], "user") == ["compressed hello"]
    monkeypatch.setattr(sesame, "_zstd_module", lambda: None)   # neither: reported, not guessed
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(NotASessionFile, match="needs Python 3.14\\+ or the zstd command"):
        parse_file("codex", z)


def test_codex_roots_honour_codex_home_and_archive():
    assert PARSERS["codex"].default_roots({"CODEX_HOME": "/x/codex"}) == ["/x/codex/sessions",
                                                                         "/x/codex/archived_sessions"]


def test_codex_rejects_other_formats_and_resumes_by_id(tmp_path):
    p = write_jsonl(tmp_path / "rollout-x.jsonl", [{"timestamp": "2025-09-10T10:00:00Z", "role": "user",
                                                    "content": "hi"}])
    with pytest.raises(NotASessionFile):
        parse_file("codex", p)
    assert PARSERS["codex"].resume_command({"session_id": cc_TID, "cwd": "/a", "path": p}) == "codex resume " + cc_TID


# -------------------------------------------------------------------------------------------------
# The same conversation in both formats gives the same chunks
# -------------------------------------------------------------------------------------------------


def test_same_conversation_parses_alike_in_claude_and_codex(tmp_path):
    question, answer, command, output = "how big is the repo?", "It has 42 files.", "git ls-files | wc -l", "42"
    cp = write_jsonl(tmp_path / "claude" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", question),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                       "input": {"command": command}}]),
        cc_cl_user("u2", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output}]),
        cc_cl_asst("a2", "2026-01-01T00:00:03Z", "m2", [{"type": "text", "text": answer}]),
    ])
    xp = write_jsonl(cc_rollout(tmp_path), [
        cc_cx_meta(ts="2026-01-01T00:00:00Z"),
        cc_cx("2026-01-01T00:00:00Z", "event_msg", {"type": "user_message", "message": question}),
        cc_cx_msg("2026-01-01T00:00:00Z", "user", question),
        cc_cx("2026-01-01T00:00:01Z", "response_item", {"type": "function_call", "name": "shell", "call_id": "c1",
                                                      "arguments": json.dumps({"command": ["bash", "-lc", command]})}),
        cc_cx("2026-01-01T00:00:02Z", "response_item", {"type": "function_call_output", "call_id": "c1",
                                                      "output": output}),
        cc_cx_msg("2026-01-01T00:00:03Z", "assistant", answer),
        cc_cx("2026-01-01T00:00:03Z", "event_msg", {"type": "agent_message", "message": answer}),
    ])
    [c], [x] = parse_file("claude", cp), parse_file("codex", xp)

    def shape(s):
        return [(ch.kind, ch.text.replace("tool: Bash", "tool: shell")) for ch in s.chunks]
    assert shape(c) == shape(x) == [("user", question), ("tool", "tool: shell\ncommand: %s\noutput:\n%s" % (command, output)),
                                    ("assistant", answer)]


# -------------------------------------------------------------------------------------------------
# Samples
# -------------------------------------------------------------------------------------------------


def test_claude_samples_parse(tmp_path):
    sessions = sample_sessions("claude-code", "claude")
    assert len(sessions) >= 7
    everything = "\n".join(c.text for s in sessions for c in s.chunks)
    users = [c.text for s in sessions for c in s.chunks if c.kind == "user"]
    assert any(u.startswith("Add a function called multiply_numbers") for u in users)
    assert "git status" in everything and "Delegate a repo search to a subagent" in users
    assert any(s.parent == "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f" for s in sessions)


def test_codex_samples_parse(tmp_path):
    sessions = sample_sessions("codex")
    assert len(sessions) >= 9
    users = [c.text for s in sessions for c in s.chunks if c.kind == "user"]
    assert any(u.startswith("finish up the users work by rigging up the chatbot-ui") for u in users)
    assert not any("<environment_context>" in u for u in users)
    tools = "\n".join(c.text for s in sessions for c in s.chunks if c.kind == "tool")
    assert "command: ls" in tools


# Where the shared samples are, relative to this test file (adjust when the file moves).


def ogc_make_db(path, script, rows=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path))
    con.executescript(script)
    for sql, params in rows:
        con.execute(sql, params)
    con.commit()
    con.close()
    return path


# -------------------------------------------------------------------------------------------------
# OpenCode
# -------------------------------------------------------------------------------------------------

ogc_OPENCODE_SCHEMA = """
CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, parent_id TEXT, slug TEXT, directory TEXT,
  title TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, time_updated INTEGER, data TEXT);
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, time_created INTEGER,
  time_updated INTEGER, data TEXT);
"""


def ogc_opencode_db(path):
    rows = [
        ("INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
         ("ses_b", "p", None, "s", "/home/u/proj", "Fix flaky CI", "1.2.0", 1730000000000, 1730000009000)),
        ("INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
         ("ses_c", "p", "ses_b", "s", "/home/u/proj", "Child session - 2024-10-27T03:33:20.000Z", "1.2.0",
          1730000005000, 1730000006000)),
    ]
    msgs = [("msg_2", "ses_b", 1730000002000, {"role": "assistant", "time": {"created": 1730000002000}}),
            ("msg_1", "ses_b", 1730000001000, {"role": "user", "time": {"created": 1730000001000}}),
            ("msg_3", "ses_c", 1730000005500, {"role": "user", "time": {"created": 1730000005500}})]
    for mid, sid, t, data in msgs:
        rows.append(("INSERT INTO message VALUES (?,?,?,?,?)", (mid, sid, t, t, json.dumps(data))))
    parts = [
        ("prt_1", "msg_1", "ses_b", {"type": "text", "text": "why does the ci flake"}),
        ("prt_2", "msg_1", "ses_b", {"type": "text", "text": "Called the Read tool: secret.txt", "synthetic": True}),
        ("prt_3", "msg_1", "ses_b", {"type": "file", "mime": "image/png", "url": "data:image/png;base64,AAAA"}),
        ("prt_4", "msg_2", "ses_b", {"type": "reasoning", "text": "look at the workflow"}),
        ("prt_5", "msg_2", "ses_b", {"type": "tool", "callID": "c1", "tool": "read",
                                     "state": {"status": "completed", "input": {"filePath": "/home/u/proj/ci.yml"},
                                               "output": "runs-on: ubuntu"}}),
        ("prt_6", "msg_2", "ses_b", {"type": "tool", "callID": "c2", "tool": "bash",
                                     "state": {"status": "error", "input": {"command": "make test"},
                                               "error": "exit status 2"}}),
        ("prt_7", "msg_2", "ses_b", {"type": "text", "text": "The cache key is wrong."}),
        ("prt_8", "msg_2", "ses_b", {"type": "step-finish", "tokens": {}}),
        ("prt_9", "msg_3", "ses_c", {"type": "text", "text": "child prompt"}),
    ]
    for pid, mid, sid, data in parts:
        rows.append(("INSERT INTO part VALUES (?,?,?,?,?,?)", (pid, mid, sid, 0, 0, json.dumps(data))))
    return ogc_make_db(path, ogc_OPENCODE_SCHEMA, rows)


def test_opencode_db_gives_every_session_with_times_title_and_parent(tmp_path):
    sessions = parse_file("opencode", ogc_opencode_db(tmp_path / "opencode.db"))
    assert [s.session_id for s in sessions] == ["ses_b", "ses_c"]
    main, child = sessions
    assert main.name == "Fix flaky CI" and main.cwd == "/home/u/proj"
    assert main.created == "2024-10-27T03:33:20.000Z" and main.modified == "2024-10-27T03:33:29.000Z"
    assert child.parent == "ses_b"
    assert child.name is None   # the placeholder title is not a name


def _store_changes(agent, tmp_path):
    """An agent's database with two sessions, and the changes its agent makes to it: a message added
    to the second, the first renamed, the second deleted. Returns (source folder, ids, [changes])."""
    if agent == "opencode":
        db = ogc_opencode_db(tmp_path / "home" / "opencode" / "opencode.db")

        def run_sql(*statements):
            con = sqlite3.connect(str(db))
            for sql, params in statements:
                con.execute(sql, params)
            con.commit()
            con.close()
        return db.parent, ("ses_b", "ses_c"), [
            lambda: run_sql(("INSERT INTO part VALUES ('prt_x', 'msg_3', 'ses_c', 1, 1730000007000, ?)",
                             (json.dumps({"type": "text", "text": "the narwhal ledger"}),)),
                            ("UPDATE session SET time_updated = 1730000007000 WHERE id = 'ses_c'", ())),
            lambda: run_sql(("UPDATE session SET title = 'Walrus budget', time_updated = 1730000008000 WHERE id = 'ses_b'", ())),
            lambda: run_sql(("DELETE FROM part WHERE session_id = 'ses_c'", ()), ("DELETE FROM message WHERE session_id = 'ses_c'", ()),
                            ("DELETE FROM session WHERE id = 'ses_c'", ()))]
    if agent == "zed":   # no marks of its own: each parsed thread's digest is its mark
        db = zed_store(tmp_path / "home" / "zed" / "threads.db", [
            ("th-a", "json", json.dumps(ZED_THREAD), None, "/p"), ("th-b", "json", json.dumps(ZED_LEGACY), None, "/q")])

        def run_sql(sql, params=()):
            con = sqlite3.connect(db)
            con.execute(sql, params)
            con.commit()
            con.close()
        grown = dict(ZED_LEGACY, messages=ZED_LEGACY["messages"] + [
            {"id": 2, "role": "user", "segments": [{"type": "text", "text": "the narwhal ledger"}], "tool_uses": [],
             "tool_results": [], "context": ""}])
        return os.path.dirname(db), ("th-a", "th-b"), [
            lambda: run_sql("UPDATE threads SET data = ? WHERE id = 'th-b'", (json.dumps(grown),)),
            lambda: run_sql("UPDATE threads SET summary = 'Walrus budget' WHERE id = 'th-a'"),
            lambda: run_sql("DELETE FROM threads WHERE id = 'th-b'")]
    agents = tmp_path / "home" / "agents"
    db = agents / "main" / "agent" / "openclaw-agent.sqlite"
    openclaw_db(db, OC_WINDOWS, OC_MAIN)

    def run_sql(*statements, events=()):
        con = sqlite3.connect(str(db), isolation_level=None)
        add_openclaw_events(con, events)
        for sql in statements:
            con.execute(sql)
        con.close()
    return agents, ("s-main", "s-sub"), [
        lambda: run_sql(events=[("s-sub", _oc_msg(8, "user", [{"type": "text", "text": "the narwhal ledger"}]))]),
        lambda: run_sql("UPDATE session_windows SET display_name = 'Walrus budget', updated_at = updated_at + 1 "
                        "WHERE session_id = 's-main'"),
        lambda: run_sql("DELETE FROM transcript_events WHERE session_id = 's-sub'",
                        "DELETE FROM session_windows WHERE session_id = 's-sub'")]


@pytest.mark.parametrize("agent", ["opencode", "openclaw", "zed"])
def test_a_database_that_changed_is_read_again_for_the_sessions_that_changed_only(env, capsys, monkeypatch, tmp_path,
                                                                                  agent):
    """An agent's database changes at every message; reading all of it again made each search after one
    take seconds (7 s for a 50 MB OpenClaw database). The sessions whose mark moved (OpenCode's and
    OpenClaw's from a query; any other store's from each parsed session's digest) are made ready
    and rewritten; the others stay as they were (same rows); a session the agent deleted is kept."""
    folder, (first, second), changes = _store_changes(agent, tmp_path)
    write_config({"sources": [{"parser": agent, "path": str(folder)}]}, tmp_path)
    assert run(capsys, "index")[0] == 0
    def rows():   # {session id: (its row in the index, deleted)}
        con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
        try:
            return {sid: (rowid, deleted) for rowid, sid, deleted in con.execute("SELECT id, session_id, deleted FROM sessions")}
        finally:
            con.close()
    before = rows()
    made, real = [], sesame.Prepared   # the sessions made ready to write, per search
    monkeypatch.setattr(sesame, "Prepared", lambda s, **kw: made[-1].add(s.session_id) or real(s, **kw))

    def search(*words):
        made.append(set())
        return search_ids(capsys, *words)
    changes[0]()                                     # a message added to the second session
    assert search("narwhal ledger") == [second]
    assert made == [{second}]
    assert rows()[first] == before[first]            # the first was not written again
    changes[1]()                                     # the first renamed
    assert search("walrus budget") == [first]
    assert made[1:] == [{first}]
    changes[2]()                                     # the second deleted by the agent: kept, as deleted
    assert search("narwhal ledger") == [second]
    assert made[2:] == [set()]
    after = rows()
    assert after[second][1] and not after[first][1]
    assert len(before) == len(after) == 2


def test_opencode_write_tool_is_shown_by_the_file_it_wrote_not_its_first_line(env, tmp_path, capsys):
    # OpenCode and Kilo (7.0.46) give a write's content before its filePath.
    rows = [("INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
             ("ses_w", "p", None, "s", "/root", "Memory bank", "1.2.0", 1730000000000, 1730000009000)),
            ("INSERT INTO message VALUES (?,?,?,?,?)", ("msg_1", "ses_w", 1730000001000, 1730000001000,
                                                       json.dumps({"role": "assistant"})))]
    parts = [{"type": "tool", "callID": "c1", "tool": "write", "state": {
                 "status": "completed", "input": {"content": "# Memory Bank\nthe kinkajou notes", "filePath": "/root/MEMORY.md"},
                 "output": "Wrote file successfully."}},
             {"type": "text", "text": "Memory bank initialized."}]
    for i, data in enumerate(parts):
        rows.append(("INSERT INTO part VALUES (?,?,?,?,?,?)", ("prt_%d" % i, "msg_1", "ses_w", 0, 0, json.dumps(data))))
    db = ogc_make_db(tmp_path / "opencode" / "opencode.db", ogc_OPENCODE_SCHEMA, rows)
    write_config({"sources": [{"parser": "opencode", "path": str(db)}]}, tmp_path)
    assert search_ids(capsys, "kinkajou") == ["ses_w"]
    code, out, _ = run(capsys, "show", "ses_w")
    tool_line = [l for l in out.splitlines() if "tool write" in l]
    assert tool_line and tool_line[0].endswith("tool write: /root/MEMORY.md")
    code, out, _ = run(capsys, "show", "ses_w", "--json", "--max-chars", "0")
    [tool] = [c for c in json.loads(out)["chunks"] if c["kind"] == "tool"]
    assert tool["text"] == "/root/MEMORY.md"   # the one-line view of the call


def test_opencode_db_messages_in_order_with_tools_joined_and_synthetic_text_as_context(tmp_path):
    s = parse_file("opencode", ogc_opencode_db(tmp_path / "opencode.db"))[0]
    assert kinds(s) == ["user", "context", "thinking", "tool", "tool", "assistant"]
    assert texts(s, "user") == ["why does the ci flake"]
    read, bash = [c for c in s.chunks if c.kind == "tool"]
    assert read.tool == "read" and read.path == "/home/u/proj/ci.yml" and "runs-on: ubuntu" in read.text
    assert "error:" in bash.text and "exit status 2" in bash.text
    assert not any("base64" in c.text for c in s.chunks)


def ogc_opencode_bash_db(path, states, tool="bash"):
    """An OpenCode 1.18 database with one session whose assistant ran bash (or `tool`) once per state."""
    rows = [("INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
             ("ses_x", "p", None, "s", "/home/u/w", "Checks", "1.18.33", 1795572203585, 1795572237891)),
            ("INSERT INTO message VALUES (?,?,?,?,?)",
             ("msg_a", "ses_x", 1795572204000, 1795572204000, json.dumps({"role": "assistant",
                                                                          "time": {"created": 1795572204000}})))]
    for i, state in enumerate(states):
        rows.append(("INSERT INTO part VALUES (?,?,?,?,?,?)", ("prt_%d" % i, "msg_a", "ses_x", 0, 0, json.dumps(
            {"type": "tool", "callID": "c%d" % i, "tool": tool, "state": dict(state, status="completed")}))))
    return ogc_make_db(path, ogc_OPENCODE_SCHEMA, rows)


def test_opencode_failed_bash_is_an_error_and_a_truncated_output_is_read_whole(tmp_path):
    # OpenCode 1.18.33: a failing command is "completed" with metadata.exit; a long output keeps its head
    # and tail in the part and the whole in <data dir>/tool-output/<id>, named by metadata.outputPath.
    data = tmp_path / "opencode"
    spilled = data / "tool-output" / "tool_21072055d001EP5rCQ23YDFTEQ"
    os.makedirs(str(spilled.parent))
    spilled.write_text("".join("line-number-%d\n" % i for i in range(1, 40001)) + "big-done\n")
    elsewhere = "/Users/someone/.local/share/opencode/tool-output/tool_21072055d001EP5rCQ23YDFTEQ"
    preview = "...output truncated...\n\nFull output saved to: %s\n\nline-number-38003\n" % elsewhere
    db = ogc_opencode_bash_db(data / "opencode.db", [
        {"input": {"command": "echo canary-1 && ls"}, "output": "canary-1\n",
         "metadata": {"output": "canary-1\n", "exit": 0, "truncated": False}},
        {"input": {"command": "echo fail-x; exit 3"}, "output": "fail-x\n",
         "metadata": {"output": "fail-x\n", "exit": 3, "truncated": False}},
        {"input": {"command": "seq 1 40000 | sed s/^/line-number-/; echo big-done"}, "output": preview,
         "metadata": {"output": "line-number-38335\n", "exit": 0, "truncated": True, "outputPath": elsewhere}},
    ])
    ok, failed, big = texts(parse_file("opencode", db)[0], "tool")
    assert "\noutput:\ncanary-1" in ok and "\nerror:\nfail-x" in failed
    assert "\noutput:\nline-number-1\n" in big and big.rstrip().endswith("big-done")
    os.remove(str(spilled))   # the whole output is gone: the part's own head and tail remain
    assert "line-number-38003" in texts(parse_file("opencode", db)[0], "tool")[2]


def test_opencode_read_keeps_the_files_lines_without_their_wrapper_and_numbers(tmp_path):
    # The read tool's result as 1.x wrote it, and as later releases do (<path>, <type>, <content>).
    older = "<file>\n00001| import walrus\n00002| walrus.run()\n00003| \n\n(End of file - total 3 lines)\n</file>"
    later = ("<path>/w/pyproject.toml</path>\n<type>file</type>\n<content>\n1: [project]\n2: name = \"okapi\"\n"
             "3: version = \"1.0\"\n\n(End of file - total 3 lines)\n</content>")
    folder = "<path>/w</path>\n<type>directory</type>\n<content>\nsrc/\n\n(1 entries)\n</content>"
    db = ogc_opencode_bash_db(tmp_path / "opencode" / "opencode.db", [
        {"input": {"filePath": "/w/main.py"}, "output": older}, {"input": {"filePath": "/w/pyproject.toml"}, "output": later},
        {"input": {"filePath": "/w"}, "output": folder}], tool="read")
    a, b, c = [t.split("\noutput:\n", 1)[1] for t in texts(parse_file("opencode", db)[0], "tool")]
    assert a == "import walrus\nwalrus.run()" and b == '[project]\nname = "okapi"\nversion = "1.0"'
    assert c == "src/\n\n(1 entries)"   # (a folder's listing: as it is)


def test_opencode_db_with_another_schema_is_not_a_session_file(tmp_path):
    db = ogc_make_db(tmp_path / "opencode.db", "CREATE TABLE session (id TEXT);")
    with pytest.raises(NotASessionFile):
        parse_file("opencode", db)


def ogc_opencode_storage(root):
    st = root / "storage"
    write_file(st / "session" / "proj1" / "ses_b.json",
          {"id": "ses_b", "projectID": "proj1", "directory": "/home/u/proj", "title": "Fix flaky CI",
           "version": "1.0.0", "time": {"created": 1730000000000, "updated": 1730000009000}})
    write_file(st / "message" / "ses_b" / "msg_2.json",
          {"id": "msg_2", "sessionID": "ses_b", "role": "assistant", "summary": True, "time": {"created": 1730000002000}})
    write_file(st / "message" / "ses_b" / "msg_1.json",
          {"id": "msg_1", "sessionID": "ses_b", "role": "user", "time": {"created": 1730000001000}})
    write_file(st / "part" / "msg_1" / "prt_1.json", {"id": "prt_1", "type": "text", "text": "why does the ci flake"})
    write_file(st / "part" / "msg_2" / "prt_2.json", {"id": "prt_2", "type": "text", "text": "Summary: cache key fixed"})
    return st / "session" / "proj1" / "ses_b.json"


def test_opencode_storage_lists_session_files_only_and_pulls_in_messages_and_parts(tmp_path):
    session_file = ogc_opencode_storage(tmp_path)
    ogc_opencode_db(tmp_path / "opencode.db")
    listed = PARSERS["opencode"].list_files(str(tmp_path))
    assert sorted(listed) == sorted([str(session_file), str(tmp_path / "opencode.db")])
    s = parse_file("opencode", session_file)[0]
    assert s.session_id == "ses_b"   # same id as the database copy: the index keeps one
    assert s.name == "Fix flaky CI" and s.cwd == "/home/u/proj"
    assert kinds(s) == ["user", "summary"]   # compaction summary message


def test_opencode_message_file_is_not_a_session(tmp_path):
    ogc_opencode_storage(tmp_path)
    with pytest.raises(NotASessionFile):
        parse_file("opencode", tmp_path / "storage" / "message" / "ses_b" / "msg_1.json")


def test_opencode_default_root_honours_xdg_data_home():
    assert PARSERS["opencode"].default_roots({"XDG_DATA_HOME": "/x/data"}) == ["/x/data/opencode"]
    assert PARSERS["opencode"].default_roots({"XDG_DATA_HOME": "/x/data", "OPENCODE_DB": "beta.db"}) ==\
        ["/x/data/opencode", "/x/data/opencode/beta.db"]


def test_opencode_samples():
    sessions = sample_sessions("opencode")
    assert {s.session_id for s in sessions} >= {"s_stage0_small", "s_stage0_large", "s_stage0_drift"}
    small = next(s for s in sessions if s.session_id == "s_stage0_small")
    assert "Hello" in texts(small, "user")
    assert any("command: ls" in t for t in texts(small, "tool"))
    drift = next(s for s in sessions if s.session_id == "s_stage0_drift")   # flat part/ folder
    assert any("cat README.md" in t for t in texts(drift, "tool"))


# -------------------------------------------------------------------------------------------------
# Gemini CLI
# -------------------------------------------------------------------------------------------------

ogc_GEMINI_META = {"sessionId": "g-1", "projectHash": "ab", "startTime": "2026-04-29T21:39:22.319Z",
               "lastUpdated": "2026-04-29T21:39:22.319Z", "kind": "main"}


def ogc_gemini_chats(tmp_path, slug="proj"):
    return tmp_path / ".gemini" / "tmp" / slug / "chats"


def test_gemini_repeated_id_is_indexed_once_with_the_newer_record(tmp_path):
    f = write_jsonl(ogc_gemini_chats(tmp_path) / "session-2026-04-29T21-39-g1.jsonl", [
        ogc_GEMINI_META,
        {"id": "u1", "timestamp": "2026-04-29T21:39:30Z", "type": "user", "content": [{"text": "list the files"}]},
        {"id": "a1", "timestamp": "2026-04-29T21:39:31Z", "type": "gemini", "content": "partial"},
        {"id": "a1", "timestamp": "2026-04-29T21:39:32Z", "type": "gemini", "content": "final answer",
         "toolCalls": [{"id": "t1", "name": "run_shell_command", "args": {"command": "ls -F"}, "status": "success",
                        "result": [{"functionResponse": {"id": "t1", "response": {"output": "README.md"}}}]}]},
        {"$set": {"lastUpdated": "2026-04-29T21:40:00Z"}},
    ])
    s = parse_file("gemini", f)[0]
    assert s.session_id == "g-1"
    assert texts(s, "assistant") == ["final answer"]
    assert kinds(s) == ["user", "assistant", "tool"]
    assert "README.md" in texts(s, "tool")[0] and "ls -F" in texts(s, "tool")[0]
    assert s.created == "2026-04-29T21:39:22.319Z" and s.modified == "2026-04-29T21:40:00.000Z"


# What Gemini CLI 0.61 writes for a session resumed once (`gemini --resume latest -p ...`), trimmed.
ogc_GEMINI_CTX = {"id": "ctx", "timestamp": "2026-11-25T02:01:45.461Z", "type": "user", "content": [
    {"text": "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n</session_context>"}]}
ogc_GEMINI_CALL = "run_shell_command__run_shell_command_1795572105628_0"
ogc_GEMINI_OUT = {"output": "<untrusted_context>\nOutput: canary-1\nProcess Group PGID: 11209\n</untrusted_context>"}
ogc_GEMINI_RESUMED = [
    dict(ogc_GEMINI_META, startTime="2026-11-25T02:01:45.459Z", lastUpdated="2026-11-25T02:01:45.459Z"),
    {"$set": {"messages": [ogc_GEMINI_CTX], "lastUpdated": "2026-11-25T02:01:45.461Z"}},
    {"id": "u1", "timestamp": "2026-11-25T02:01:45.584Z", "type": "user",
     "content": [{"text": "Check the canary. Please run `echo canary-1 && ls`"}]},
    {"id": "g1", "timestamp": "2026-11-25T02:01:45.719Z", "type": "gemini", "content": "", "toolCalls": [
        {"id": ogc_GEMINI_CALL, "name": "run_shell_command", "args": {"command": "echo canary-1 && ls"},
         "result": [{"functionResponse": {"id": ogc_GEMINI_CALL, "name": "run_shell_command",
                                          "response": ogc_GEMINI_OUT}}], "status": "success"}]},
    {"id": "r1", "timestamp": "2026-11-25T02:01:45.806Z", "type": "user", "content": [
        {"functionResponse": {"id": ogc_GEMINI_CALL, "name": "run_shell_command", "response": ogc_GEMINI_OUT}}]},
    # the resume: a second metadata line, then the history again, its tool calls as content parts only
    dict(ogc_GEMINI_META, startTime="2026-11-25T02:01:50.655Z", lastUpdated="2026-11-25T02:01:50.655Z"),
    {"$set": {"messages": [
        dict(ogc_GEMINI_CTX, timestamp="2026-11-25T02:01:50.656Z"),
        {"id": "u1", "timestamp": "2026-11-25T02:01:50.669Z", "type": "user",
         "content": [{"text": "Check the canary. Please run `echo canary-1 && ls`"}]},
        {"id": "g1", "timestamp": "2026-11-25T02:01:50.669Z", "type": "gemini", "content": [
            {"functionCall": {"id": ogc_GEMINI_CALL, "name": "run_shell_command",
                              "args": {"command": "echo canary-1 && ls"}}}]},
        {"id": "g1_response", "timestamp": "2026-11-25T02:01:50.669Z", "type": "user", "content": [
            {"functionResponse": {"id": ogc_GEMINI_CALL, "name": "run_shell_command", "response": ogc_GEMINI_OUT}}]},
        {"id": "r1", "timestamp": "2026-11-25T02:01:50.669Z", "type": "user", "content": [
            {"functionResponse": {"id": ogc_GEMINI_CALL, "name": "run_shell_command", "response": ogc_GEMINI_OUT}}]},
        {"id": "a1", "timestamp": "2026-11-25T02:01:50.669Z", "type": "gemini", "content": [{"text": "All good."}]},
    ]}},
    {"id": "u2", "timestamp": "2026-11-25T02:01:50.769Z", "type": "user",
     "content": [{"text": "Now a failure please run `echo fail-x; exit 3`"}]},
    {"id": "g2", "timestamp": "2026-11-25T02:01:50.932Z", "type": "gemini", "content": "", "toolCalls": [
        {"id": "call-2", "name": "run_shell_command", "args": {"command": "echo fail-x; exit 3"}, "status": "success",
         "result": [{"functionResponse": {"id": "call-2", "name": "run_shell_command", "response": {
             "output": "<untrusted_context>\nOutput: fail-x\nExit Code: 3\nProcess Group PGID: 11316\n</untrusted_context>"}}}]}]},
    {"$set": {"lastUpdated": "2026-11-25T02:01:51.035Z"}},
]


def test_gemini_resumed_session_keeps_its_tool_calls_creation_time_and_failures(tmp_path):
    f = write_jsonl(ogc_gemini_chats(tmp_path) / "session-2026-11-25T02-01-95eb3fe0.jsonl", ogc_GEMINI_RESUMED)
    [s] = parse_file("gemini", f)
    assert s.created == "2026-11-25T02:01:45.459Z" and s.modified == "2026-11-25T02:01:51.035Z"
    assert kinds(s) == ["context", "user", "tool", "assistant", "user", "tool"]
    canary, failure = texts(s, "tool")
    # (the output alone: not the tags 0.61 wraps it in for the model, nor the shell's fields)
    assert canary == "tool: run_shell_command\ncommand: echo canary-1 && ls\noutput:\ncanary-1"
    assert failure == "tool: run_shell_command\ncommand: echo fail-x; exit 3\nerror:\nExit code 3\nfail-x"


def test_gemini_resume_stub_with_the_same_session_id_is_not_a_second_session(tmp_path):
    chats = ogc_gemini_chats(tmp_path)
    real = write_jsonl(chats / "session-2026-11-25T02-01-95eb3fe0.jsonl", ogc_GEMINI_RESUMED)
    stub = write_jsonl(chats / "session-2026-11-25T02-05-95eb3fe0.jsonl", [
        dict(ogc_GEMINI_META, startTime="2026-11-25T02:05:00.000Z"),
        {"$set": {"messages": [ogc_GEMINI_CTX], "lastUpdated": "2026-11-25T02:05:00.001Z"}}])
    assert parse_file("gemini", stub) == [] and len(parse_file("gemini", real)) == 1
    os.remove(real)   # alone, a session that only started is still a session
    assert [s.session_id for s in parse_file("gemini", stub)] == ["g-1"]


def test_gemini_cut_output_is_read_whole_from_tool_outputs(tmp_path):
    # Gemini CLI 0.61 keeps the first 8,000 and last 32,000 characters in the record and the whole output
    # in <project temp>/tool-outputs/session-<id>/<call id>.txt (found there also when the path is stale).
    chats = ogc_gemini_chats(tmp_path)
    whole = chats.parent / "tool-outputs" / "session-g-1" / "run_shell_command_1.txt"
    os.makedirs(str(whole.parent))
    whole.write_text("<untrusted_context>\nOutput: " + "".join("line-number-%d\n" % i for i in range(1, 40001))
                     + "big-done\n</untrusted_context>")
    cut = ("Output too large. Showing first 8,000 and last 32,000 characters. For full output see: "
           "/home/other/.gemini/tmp/proj/tool-outputs/session-g-1/run_shell_command_1.txt\n<untrusted_context>\n"
           "Output: line-number-1\n... [truncated] ...\nline-number-40000\nbig-done\n</untrusted_context>")
    f = write_jsonl(chats / "session-2026-11-25T02-13-g1.jsonl", [
        ogc_GEMINI_META,
        {"id": "u1", "timestamp": "2026-11-25T02:13:49.517Z", "type": "user", "content": [{"text": "Large one"}]},
        {"id": "g1", "timestamp": "2026-11-25T02:13:49.613Z", "type": "gemini", "content": "", "toolCalls": [
            {"id": "run_shell_command_1", "name": "run_shell_command", "args": {"command": "seq 1 40000"},
             "status": "success", "result": [{"functionResponse": {"id": "run_shell_command_1",
                                                                   "response": {"output": cut}}}]}]},
    ])
    [tool] = texts(parse_file("gemini", f)[0], "tool")
    assert "\nline-number-2\n" in tool and "Output too large" not in tool and "big-done" in tool


def test_gemini_masked_outputs_are_read_from_the_saved_file_or_their_preview_as_text(tmp_path):
    # Gemini CLI masks old outputs once a history grows long (ToolOutputMaskingService, in 0.61's
    # bundle), in the recording too: a preview of the response as JSON, and where it saved the whole.
    chats = ogc_gemini_chats(tmp_path)
    saved = chats.parent / "tool-outputs" / "session-g-1" / "read_file_read_file_2_ab12.txt"
    os.makedirs(str(saved.parent))
    whole = "".join("Speaker %d\nline about the quokka %d\n" % (i, i) for i in range(400)) + "middle-only pangolin\n" + "end"
    saved.write_text(json.dumps({"output": whole}, indent=2))

    def masked(preview, path):
        return ("<tool_output_masked>\n%s\n\nOutput too large. Full output available at: %s\n</tool_output_masked>"
                % (preview, path))
    as_json = json.dumps({"output": "00;00;05\nSpeaker 3\nyou know, U.S. history \"begins\" here"}, indent=2)
    preview = as_json[:40] + "\n... [TRUNCATED] ...\n" + as_json[40:]
    shell = "Output: first line\n\n... [30 lines omitted] ...\n\nlast line\nExit Code: 2\nProcess Group PGID: 36772"

    def call(i, name, output, args):
        return {"id": "%s_%d" % (name, i), "name": name, "args": args, "status": "success",
                "result": [{"functionResponse": {"id": "%s_%d" % (name, i), "response": {"output": output}}}]}
    f = write_jsonl(chats / "session-2026-11-25T02-13-g1.jsonl", [
        ogc_GEMINI_META,
        {"id": "u1", "timestamp": "2026-11-25T02:13:49.517Z", "type": "user", "content": [{"text": "Read them"}]},
        {"id": "g1", "timestamp": "2026-11-25T02:13:49.613Z", "type": "gemini", "content": "", "toolCalls": [
            call(1, "read_file", masked(preview, "C:\\Users\\x\\.gemini\\tmp\\p\\tool-outputs\\session-g-1\\gone.txt"),
                 {"file_path": "a.txt"}),
            call(2, "read_file", masked(as_json[:30], "/elsewhere/tool-outputs/session-g-1/read_file_read_file_2_ab12.txt"),
                 {"file_path": "b.txt"}),
            call(3, "run_shell_command", masked(shell, "/nowhere/tool-outputs/x.txt"), {"command": "make"})]},
    ])
    previewed, read, ran = texts(parse_file("gemini", f)[0], "tool")
    # No saved file: the preview as text, its lines' first words words again (not "nSpeaker").
    assert previewed.endswith("output:\n00;00;05\nSpeaker 3\nyou \n... [TRUNCATED] ...\nknow, U.S. history \"begins\" here")
    # The saved file (found in this session's tool-outputs when the path is another machine's): all of it.
    assert "middle-only pangolin" in read and "\nline about the quokka 399\n" in read and "masked" not in read
    # A path that only passes through a tool-outputs folder is not read.
    secret = tmp_path / "secret.txt"
    secret.write_text("walrus credentials")
    sneaky = str(saved.parent) + "/" + os.path.relpath(str(secret), str(saved.parent))
    assert os.path.isfile(sneaky) and "/tool-outputs/session-" in sneaky
    f2 = write_jsonl(chats / "session-2026-11-25T02-14-g2.jsonl", [
        ogc_GEMINI_META,
        {"id": "g1", "timestamp": "2026-11-25T02:13:49.613Z", "type": "gemini", "content": "", "toolCalls": [
            call(4, "read_file", masked(as_json[:30], sneaky), {"file_path": "c.txt"})]}])
    assert "walrus" not in texts(parse_file("gemini", f2)[0], "tool")[0]
    # A shell command's preview: its output, the fields left out, the failure said first.
    assert ran.endswith("error:\nExit code 2\nfirst line\n\n... [30 lines omitted] ...\n\nlast line")
    assert sesame.fts_terms("\\nSpeaker") != sesame.fts_terms("Speaker")   # (why the escapes had to go)


def test_gemini_rewind_drops_the_message_and_everything_after(tmp_path):
    f = write_jsonl(ogc_gemini_chats(tmp_path) / "session-x.jsonl", [
        ogc_GEMINI_META,
        {"id": "u1", "type": "user", "content": "first question"},
        {"id": "u2", "type": "user", "content": "abandoned question"},
        {"id": "a2", "type": "gemini", "content": "abandoned answer"},
        {"$rewindTo": "u2"},
        {"id": "u3", "type": "user", "content": "second question"},
    ])
    s = parse_file("gemini", f)[0]
    assert texts(s, "user") == ["first question", "second question"]
    assert not texts(s, "assistant")


def test_gemini_rewind_to_unknown_id_clears_and_set_messages_replaces(tmp_path):
    f = write_jsonl(ogc_gemini_chats(tmp_path) / "session-x.jsonl", [
        ogc_GEMINI_META,
        {"id": "u1", "type": "user", "content": "gone"},
        {"$rewindTo": "nope"},
        {"id": "u2", "type": "user", "content": "also replaced"},
        {"$set": {"messages": [{"id": "u9", "type": "user", "content": "checkpointed"}], "summary": "Fix the build"}},
    ])
    s = parse_file("gemini", f)[0]
    assert texts(s, "user") == ["checkpointed"]
    assert s.name == "Fix the build"   # the generated summary is the title


def test_gemini_injected_session_context_is_not_user_and_title_is_first_real_prompt(tmp_path):
    f = write_jsonl(ogc_gemini_chats(tmp_path) / "session-x.jsonl", [
        ogc_GEMINI_META,
        {"id": "u0", "type": "user", "content": "<session_context>OS: linux, cwd /w</session_context>"},
        {"id": "u1", "type": "user", "content": "@src/a.py explain\n--- Content from referenced files ---\nprint(1)",
         "displayContent": "@src/a.py explain"},
        {"id": "i1", "type": "info", "content": "Request cancelled."},
    ])
    s = parse_file("gemini", f)[0]
    assert texts(s, "user") == ["@src/a.py explain"]
    assert any("session_context" in t for t in texts(s, "context"))
    assert any("print(1)" in t for t in texts(s, "context"))
    assert "Request cancelled." in texts(s, "context")
    assert s.name == "@src/a.py explain"


def test_gemini_subagent_points_to_parent_and_cwd_comes_from_project_root_marker(tmp_path):
    chats = ogc_gemini_chats(tmp_path)
    write_file(chats.parent / ".project_root", "/home/u/myrepo\n")
    f = write_jsonl(chats / "parent-uuid" / "child-uuid.jsonl", [
        dict(ogc_GEMINI_META, sessionId="child-uuid", kind="subagent"),
        {"id": "u1", "type": "user", "content": "find the bug"},
    ])
    s = parse_file("gemini", f)[0]
    assert s.parent == "parent-uuid" and s.session_id == "child-uuid"
    assert s.cwd == "/home/u/myrepo"


def test_gemini_cwd_from_projects_registry_by_project_hash(tmp_path):
    path = "/home/u/hashed"
    digest = hashlib.sha256(path.encode()).hexdigest()
    write_file(tmp_path / ".gemini" / "projects.json", {"projects": {path: "other-slug"}})
    f = write_jsonl(ogc_gemini_chats(tmp_path, slug=digest) / "session-x.jsonl",
                    [dict(ogc_GEMINI_META, projectHash=digest), {"id": "u1", "type": "user", "content": "hi"}])
    assert parse_file("gemini", f)[0].cwd == path


def test_gemini_cwd_of_an_old_hashed_project_folder_from_the_paths_its_session_names(tmp_path, monkeypatch, capsys):
    """Gemini CLI before 0.29 named the folder after the project path's SHA-256 and wrote the path
    nowhere: the folder above a path the session's tools name whose hash is the projectHash is the
    cwd (a Windows drive letter in either case), and `--cwd` finds the session; a session that names
    no such path has none, and is still found."""
    home = bare_home(tmp_path, monkeypatch)
    for sid, root, said in (("g-posix", "/home/dev/otter-app", "/home/dev/otter-app/src/main.py"),
                            ("g-win", "c:\\Users\\dev\\Otter", "C:\\Users\\dev\\Otter\\notes\\todo.md"),
                            ("g-none", "/home/dev/elsewhere", "main.py")):
        digest = hashlib.sha256(root.encode()).hexdigest()
        write_file(ogc_gemini_chats(home, slug=digest) / ("session-2025-01-01T00-00-%s.json" % sid), json.dumps(dict(
            ogc_GEMINI_META, sessionId=sid, projectHash=digest,
            messages=[{"id": "m1", "type": "user", "content": "read the otter notes"},
                      {"id": "m2", "type": "gemini", "content": "reading",
                       "toolCalls": [{"id": "t1", "name": "read_file", "args": {"absolute_path": said}, "status": "success",
                                      "result": [{"functionResponse": {"id": "t1", "response": {"output": "otter"}}}]}]}]),
            indent=2 if sid != "g-posix" else None))   # (as Gemini CLI wrote them; one line is read as JSONL)
    write_file(home / ".gemini" / "projects.json", {"projects": {}})
    run(capsys, "index")
    code, out, _ = run(capsys, "search", "otter notes", "--json", "--max-chars", "0")
    assert {r["sessionId"]: r["cwd"] for r in json.loads(out)["results"]} == {
        "g-posix": "/home/dev/otter-app", "g-win": "c:\\Users\\dev\\Otter", "g-none": None}
    assert search_ids(capsys, "otter", "--cwd", "/home/dev/otter-app") == ["g-posix"]


def test_gemini_legacy_json_and_list_files_prefers_migrated_jsonl(tmp_path):
    chats = ogc_gemini_chats(tmp_path)
    legacy = write_file(chats / "session-2025-01-01T00-00-aaaa.json", json.dumps(dict(
        ogc_GEMINI_META, sessionId="g-legacy",
        messages=[{"id": "m1", "type": "user", "content": "legacy prompt"},
                  {"id": "m2", "type": "gemini", "content": "legacy answer",
                   "thoughts": [{"subject": "Plan", "description": "read files"}]}]), indent=2))
    s = parse_file("gemini", legacy)[0]
    assert s.session_id == "g-legacy" and kinds(s) == ["user", "thinking", "assistant"]
    write_file(chats / "session-2025-01-02T00-00-bbbb.json", "{}")
    write_jsonl(chats / "session-2025-01-02T00-00-bbbb.jsonl", [ogc_GEMINI_META])
    write_file(chats.parent / "logs.json", "[]")
    write_file(chats.parent / "checkpoint-x.json", "[]")
    listed = sorted(os.path.basename(p) for p in PARSERS["gemini"].list_files(str(tmp_path / ".gemini" / "tmp")))
    assert listed == ["checkpoint-x.json", "logs.json", "session-2025-01-01T00-00-aaaa.json",
                      "session-2025-01-02T00-00-bbbb.json", "session-2025-01-02T00-00-bbbb.jsonl"]
    # what is listed but not a session says why (it is reported, never missed in silence)
    for name, why in (("checkpoint-x.json", "checkpoint"), ("logs.json", "prompt log"),
                      ("chats/session-2025-01-02T00-00-bbbb.json", "migrated")):
        with pytest.raises(NotASessionFile, match=why):
            parse_file("gemini", chats.parent / name)


def test_gemini_subagent_chats_are_indexed_under_their_parent_and_other_files_are_reported(env, tmp_path, capsys):
    # Gemini CLI writes a sub-agent's chat (kind "subagent") in a folder named after the session that ran
    # it, and the memory service's skill extraction under chats/skill-extraction-<id>/: legacy whole-file
    # JSON as well as JSONL. Each is a session of its own with its parent; nothing in the tree is missed.
    chats = tmp_path / "home" / ".gemini" / "tmp" / "proj" / "chats"
    write_config({"sources": [{"parser": "gemini", "path": str(chats.parent.parent)}]}, tmp_path)
    write_jsonl(chats / "session-2026-04-16T22-38-b1f31681.jsonl", [
        dict(ogc_GEMINI_META, sessionId="b1f31681-4b57"),
        {"id": "u1", "type": "user", "content": "update the global contractor role"}])
    write_file(chats / "b1f31681-4b57" / "xs82vp.json", json.dumps(dict(
        ogc_GEMINI_META, sessionId="xs82vp", kind="subagent",
        messages=[{"id": "m1", "type": "user", "content": "add the gardener checkin requirement"},
                  {"id": "m2", "type": "gemini", "content": "added the gardener checkin"}]), indent=2))
    write_file(chats / "skill-extraction-bcb99ecd" / "wuvi38.json", json.dumps(dict(
        ogc_GEMINI_META, sessionId="wuvi38", kind="subagent", summary='{\n  "response": "Extracted 3 new skills"\n}',
        messages=[{"id": "m1", "type": "user", "content": "extract reusable skills from the arborscaping audit"}]),
        indent=2))
    write_jsonl(chats / "b1f31681-4b57" / "k2.jsonl", [
        dict(ogc_GEMINI_META, sessionId="k2", kind="subagent"),
        {"id": "u1", "type": "user", "content": "search the quokka registry"}])
    write_file(chats.parent / "logs.json", "[]")
    summary = index_json(capsys)
    assert summary["filesSeen"] == 5
    assert skipped_reasons(summary) == {"logs.json": "not a Gemini CLI session file (the prompt log (logs.json): "
                                                     "the prompts are in the chats' sessions)"}
    for word, sid, parent in (("gardener", "xs82vp", "b1f31681-4b57"), ("arborscaping", "wuvi38", "skill-extraction-bcb99ecd"),
                              ("quokka", "k2", "b1f31681-4b57")):
        [hit] = search_json(capsys, word)["results"]
        assert (hit["sessionId"], hit["parent"]) == (sid, parent)
        if sid == "wuvi38":   # a sub-agent's summary is its result as JSON: named by the text
            assert hit["name"] == "Extracted 3 new skills"


def test_gemini_generated_subagent_prompts_are_context_and_a_cut_json_summary_still_names_it(tmp_path):
    # The memory manager sub-agent's prompt is every GEMINI.md loaded, then MCP servers' instructions,
    # then the request; the skill extraction's is an index of the user's other sessions. Only the
    # request is the user's. Its summary is its JSON result cut after ~200 characters with "...".
    chats = ogc_gemini_chats(tmp_path)
    memory = ("\n# Initial Context\n\n--- Global ---\n--- Context from: ~/.gemini/GEMINI.md ---\n"
              "the marmoset conventions of every project\n--- End of Context from: ~/.gemini/GEMINI.md ---\n\n"
              "--- Project ---\n--- Context from: GEMINI.md ---\nmarmoset deployment notes\n"
              "--- End of Context from: GEMINI.md ---\nThe following are instructions provided by the tool server "
              "'docs':\n---[start of server instructions]---\ncall the marmoset tool\n---[end of server instructions]---\n"
              "Remember that the gardener reviews every report.")
    f = write_file(chats / "parent-uuid" / "m1.json", json.dumps(dict(
        ogc_GEMINI_META, sessionId="m1", kind="subagent",
        summary='{\n  "response": "Stored the \\"gardener\\" rule in the project GEMINI.md file, which the agents...',
        messages=[{"id": "u1", "type": "user", "content": [{"text": memory}]},
                  {"id": "a1", "type": "gemini", "content": "stored it"}])))
    [s] = parse_file("gemini", f)
    assert texts(s, "user") == ["Remember that the gardener reviews every report."]
    assert "marmoset" not in " ".join(texts(s, "user")) and "marmoset deployment" in " ".join(texts(s, "context"))
    assert s.name == 'Stored the "gardener" rule in the project GEMINI.md file, which the agents...'
    index = ("# Existing Skills\n\nNone yet.\n\n# Session Index\n\n- [NEW] Fix the marmoset build (12 user msgs)\n\n"
             "Analyze the session index above. Read sessions that suggest repeated workflows using read_file.")
    f = write_jsonl(chats / "skill-extraction-1a2b3c4d" / "k9.jsonl", [
        dict(ogc_GEMINI_META, sessionId="k9", kind="subagent"), {"id": "u1", "type": "user", "content": index}])
    [s] = parse_file("gemini", f)
    assert texts(s, "user") == [] and texts(s, "context") == [index]


def test_gemini_foreign_json_is_not_a_session_file(tmp_path):
    with pytest.raises(NotASessionFile):
        parse_file("gemini", write_file(tmp_path / "x.jsonl", '{"type": "session", "id": "pi"}\n'))
    with pytest.raises(NotASessionFile):
        parse_file("gemini", write_file(tmp_path / "y.json", '{\n "a": 1\n}'))


def test_gemini_home_env():
    assert PARSERS["gemini"].default_roots({"GEMINI_CLI_HOME": "/h"}) == ["/h/.gemini/tmp"]


def test_gemini_samples():
    sessions = sample_sessions("gemini")
    assert len(sessions) == 4
    jsonl = next(s for s in sessions if s.session_id == "gemini_stage0_jsonl")
    assert "Say hello and list files." in texts(jsonl, "user")
    assert any("ls -F" in t for t in texts(jsonl, "tool"))
    assert not any("AAAA" in c.text for s in sessions for c in s.chunks)   # inline image data


# -------------------------------------------------------------------------------------------------
# Cursor
# -------------------------------------------------------------------------------------------------

def ogc_cursor_line(role, *blocks):
    return {"role": role, "message": {"content": list(blocks)}}


def test_cursor_user_query_wrapper_is_the_user_and_the_rest_is_context(tmp_path):
    f = write_jsonl(tmp_path / "agent-transcripts" / "c1" / "c1.jsonl", [
        ogc_cursor_line("user", {"type": "text", "text": "<user_info>\nOS: darwin\nWorkspace Path: /Users/u/app\n"
                                                    "</user_info>\n<user_query>\nfix the login bug\n</user_query>"}),
        ogc_cursor_line("assistant", {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "tu1", "name": "Shell", "input": {"command": "git status"}}),
        ogc_cursor_line("user", {"type": "tool_result", "tool_use_id": "tu1", "content": "clean"}),
        {"type": "turn_ended", "status": "success"},
    ])
    s = parse_file("cursor", f)[0]
    assert s.session_id == "c1"
    assert texts(s, "user") == ["fix the login bug"]
    assert any("user_info" in t for t in texts(s, "context"))
    assert s.cwd == "/Users/u/app"
    assert kinds(s) == ["context", "user", "assistant", "tool"]
    assert "git status" in texts(s, "tool")[0] and "clean" in texts(s, "tool")[0]
    assert s.name is None and s.created and s.created.endswith("Z")


def test_cursor_tool_result_without_ids_joins_the_waiting_call(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [
        ogc_cursor_line("user", {"type": "text", "text": "read it"}),
        ogc_cursor_line("assistant", {"type": "tool_use", "name": "Read", "input": {"file_path": "a.txt"}}),
        ogc_cursor_line("user", {"type": "tool_result", "tool_use_id": "t9", "content": [{"type": "text", "text": "hello"}]}),
    ])
    s = parse_file("cursor", f)[0]
    assert kinds(s) == ["user", "tool"]
    assert "hello" in s.chunks[1].text and s.chunks[1].path == "a.txt"


def test_cursor_subagent_transcript_points_to_parent(tmp_path):
    f = write_jsonl(tmp_path / "agent-transcripts" / "p1" / "subagents" / "k1.jsonl",
                    [ogc_cursor_line("user", {"type": "text", "text": "List files"})])
    s = parse_file("cursor", f)[0]
    assert s.session_id == "k1" and s.parent == "p1"


def test_cursor_transcript_without_a_final_newline_has_its_last_message_found(env, tmp_path, capsys):
    # Cursor never ends an agent transcript with a newline (checked on 100 real files); the last line
    # is usually the assistant's closing summary.
    cursor = tmp_path / "home" / ".cursor"
    write_jsonl(cursor / "projects" / "Users-u-app" / "agent-transcripts" / "a1" / "a1.jsonl",
                [ogc_cursor_line("user", {"type": "text", "text": "<user_query>\nset up the editor\n</user_query>"})],
                raw_tail=json.dumps(ogc_cursor_line("assistant", {"type": "text", "text": "Added an LspAttach autocmd."})))
    write_config({"sources": [{"parser": "cursor", "path": str(cursor)}]}, tmp_path)
    assert index_json(capsys)["linesSkipped"] == 0
    assert search_ids(capsys, "LspAttach") == ["a1"]
    code, out, _ = run(capsys, "show", "a1", "--json")
    assert [c["text"] for c in json.loads(out)["chunks"]] == ["set up the editor", "Added an LspAttach autocmd."]


def ogc_store_db(path, meta, blobs=()):
    rows = [("INSERT INTO meta VALUES (?,?)", ("0", json.dumps(meta).encode().hex()))]
    for i, b in enumerate(blobs):
        data = json.dumps(b).encode() if isinstance(b, dict) else b
        rows.append(("INSERT INTO blobs VALUES (?,?)", ("%064x" % (1000 - i), data)))
    return ogc_make_db(path, "CREATE TABLE blobs (id TEXT PRIMARY KEY, data BLOB);"
                         "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);", rows)


def test_cursor_cli_store_db_meta_and_json_message_blobs(tmp_path):
    db = ogc_store_db(tmp_path / ".cursor" / "chats" / "abc" / "a1" / "store.db",
                  {"agentId": "a1", "name": "Deploy script", "createdAt": 1775522590321},
                  [{"role": "system", "content": "You are an agent"},
                   {"role": "user", "content": [{"type": "text", "text": "<user_query>\nwrite deploy.sh\n</user_query>"}]},
                   b"\x0a\x20" + b"\x01" * 32,   # a protobuf tree node
                   {"role": "assistant", "content": [{"type": "reasoning", "text": "plan"},
                                                     {"type": "tool-call", "toolCallId": "x", "toolName": "Write",
                                                      "args": {"path": "deploy.sh"}}]},
                   {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "x", "toolName": "Write",
                                                 "result": "wrote 10 lines"}]}])
    s = parse_file("cursor", db)[0]
    assert s.session_id == "a1" and s.name == "Deploy script"
    assert s.created == "2026-04-07T00:43:10.321Z"
    assert kinds(s) == ["user", "thinking", "tool"]
    assert texts(s, "user") == ["write deploy.sh"]
    assert "wrote 10 lines" in texts(s, "tool")[0] and s.chunks[2].path == "deploy.sh"
    assert not any("You are an agent" in c.text for c in s.chunks)


def ogc_pb_varint(n):
    out = bytearray()
    while True:
        n, low = n >> 7, n & 0x7F
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ogc_pb(*fields):
    """A protobuf message from (field number, value) pairs: ints as varints, text and bytes
    length-delimited (nested messages are bytes made by ogc_pb)."""
    out = b""
    for n, v in fields:
        if isinstance(v, int):
            out += ogc_pb_varint(n << 3) + ogc_pb_varint(v)
        else:
            v = v.encode() if isinstance(v, str) else v
            out += ogc_pb_varint(n << 3 | 2) + ogc_pb_varint(len(v)) + v
    return out


class ogc_BlobStore:
    """A Cursor CLI store.db: blobs named by the SHA-256 of their bytes; protobuf fields name them by
    the 32 raw bytes of that digest."""

    def __init__(self):
        self.blobs = []

    def put(self, data):
        data = json.dumps(data).encode() if isinstance(data, dict) else data
        self.blobs.append(data)
        return hashlib.sha256(data).digest()

    def write(self, path, meta):
        rows = [("INSERT INTO meta VALUES (?,?)", ("0", json.dumps(meta).encode().hex()))]
        rows += [("INSERT OR IGNORE INTO blobs VALUES (?,?)", (hashlib.sha256(b).hexdigest(), b)) for b in self.blobs]
        return ogc_make_db(path, "CREATE TABLE blobs (id TEXT PRIMARY KEY, data BLOB);"
                                 "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);", rows)


def ogc_cursor_turns_store(folder):
    """A chat as the current Cursor CLI stores it: the root (agent.v1.ConversationStateStructure) lists
    the JSON prompt messages (field 1) and the turns (field 8); a turn names its user message and
    steps; a step is assistant text (1), a tool call (2) or thinking (3)."""
    b = ogc_BlobStore()
    prompt = [b.put({"role": "system", "content": "You are a coding agent"}),
              b.put({"role": "user", "content": "<user_info>\nWorkspace Path: /home/u/app\n</user_info>"})]
    user = b.put(ogc_pb((1, "<user_query>\nrun the tests\n</user_query>"), (2, "m-1"), (25, 1775522591000)))
    thinking = b.put(ogc_pb((3, ogc_pb((1, "pytest first"), (2, 120), (3, 1775522592000)))))
    shell_args = ogc_pb((1, "pytest -q"), (2, "/home/u/app"))                       # ShellArgs
    shell_failure = ogc_pb((1, "pytest -q"), (3, 1), (5, "1 failed, 3 passed"))      # command, exit code, stdout
    shell_call = ogc_pb((1, ogc_pb((1, shell_args), (2, ogc_pb((2, shell_failure))))),   # ToolCall.shell_tool_call
                        (57, "call_1"), (59, 1775522593000))
    shell = b.put(ogc_pb((2, shell_call)))
    content = b.put(b"def test_login(): assert False\n")
    read_call = ogc_pb((8, ogc_pb((1, ogc_pb((1, "tests/test_login.py"))),           # ToolCall.read_tool_call
                                  (2, ogc_pb((1, ogc_pb((10, content))))))),          # success, content blob id
                       (59, 1775522594000))
    read = b.put(ogc_pb((2, read_call)))
    unknown = b.put(ogc_pb((2, ogc_pb((99, ogc_pb((1, ogc_pb((1, "holo-arg"))))), (57, "call_3")))))
    answer = b.put(ogc_pb((1, ogc_pb((1, "One test fails: test_login."), (2, 1775522595000)))))
    turn1 = b.put(ogc_pb((1, ogc_pb((1, user), (2, thinking), (2, shell), (2, read), (2, unknown), (2, answer),
                                    (3, "req-1")))))
    turn2 = b.put(ogc_pb((2, ogc_pb((1, b.put(ogc_pb((1, "git status")))),
                                    (2, b.put(ogc_pb((1, "nothing to commit"), (3, 0))))))))
    root = b.put(ogc_pb((1, prompt[0]), (1, prompt[1]), (8, turn1), (8, turn2), (26, 1775522590321)))
    db = b.write(folder / "store.db", {"agentId": folder.name, "latestRootBlobId": root.hex(), "name": "New Agent",
                                        "mode": "default", "createdAt": 1775522590321, "lastUsedModel": "composer-2",
                                        "blobEncryptionKey": "0f" * 32})
    (folder / "meta.json").write_text(json.dumps({"schemaVersion": 1, "agentId": folder.name, "createdAtMs": 1775522590321,
                                                  "updatedAtMs": 1775522596000, "hasConversation": True,
                                                  "cwd": "/home/u/app", "title": "Failing login test"}))
    return db


def test_cursor_cli_store_turns_decoded_from_protobuf(tmp_path):
    db = ogc_cursor_turns_store(tmp_path / ".cursor" / "chats" / "abc" / "c0ffee")
    report = ParseReport()
    [s] = PARSERS["cursor"].parse(str(db), report)
    assert (s.session_id, s.cwd, s.name) == ("c0ffee", "/home/u/app", "Failing login test")
    assert kinds(s) == ["user", "thinking", "tool", "tool", "tool", "assistant", "tool"]
    assert texts(s, "user") == ["run the tests"] and texts(s, "thinking") == ["pytest first"]
    shell, read, unknown, user_shell = [c for c in s.chunks if c.kind == "tool"]
    assert shell.tool == "shell" and "command: pytest -q" in shell.text
    assert "error:" in shell.text and "1 failed, 3 passed" in shell.text   # exit code 1: a failure
    assert shell.ts == "2026-04-07T00:43:13.000Z"
    assert read.tool == "read" and read.path == "tests/test_login.py" and "def test_login" in read.text
    assert unknown.tool == "tool_99" and "holo-arg" in unknown.text
    assert report.unknown == {"store tool 99": 1}
    assert user_shell.tool == "shell" and "git status" in user_shell.text and "nothing to commit" in user_shell.text
    assert texts(s, "assistant") == ["One test fails: test_login."]
    assert s.created == "2026-04-07T00:43:10.321Z" and s.modified >= "2026-04-07T00:43:16.000Z"
    assert not any("You are a coding agent" in c.text or "0f0f0f" in c.text for c in s.chunks)
    assert PARSERS["cursor"].sidecars(str(db)) == [str(db) + "-wal", str(db.parent / "meta.json")]


def test_cursor_transcript_of_a_chat_in_a_store_is_not_indexed_twice(tmp_path):
    ogc_cursor_turns_store(tmp_path / ".cursor" / "chats" / "abc" / "c0ffee")
    f = write_jsonl(tmp_path / ".cursor" / "projects" / "home-u-app" / "agent-transcripts" / "c0ffee" / "c0ffee.jsonl",
                        [ogc_cursor_line("user", {"type": "text", "text": "<user_query>run the tests</user_query>"})])
    assert parse_file("cursor", f) == []


def test_cursor_cli_store_json_messages_in_root_order(tmp_path):
    # Stores written before turns: the root lists JSON messages (AI SDK parts), in conversation order.
    b = ogc_BlobStore()
    answer = b.put({"role": "assistant", "content": [{"type": "text", "text": "Second"}]})
    question = b.put({"role": "user", "content": "First"})
    root = b.put(ogc_pb((1, question), (1, answer), (8, b"\x07" * 32)))   # a turn whose blob is not there
    db = b.write(tmp_path / "chats" / "h" / "a2" / "store.db", {"agentId": "a2", "latestRootBlobId": root.hex()})
    report = ParseReport()
    [s] = PARSERS["cursor"].parse(str(db), report)
    assert [c.text for c in s.chunks] == ["First", "Second"]
    assert report.skipped == {"unreadable turn": 1}


def test_cursor_resume_command_for_cli_chats_only():
    cursor = PARSERS["cursor"]
    assert cursor.resume_command({"session_id": "c0ffee", "cwd": "/home/u/app", "path": "/h/.cursor/chats/x/c0ffee/store.db"}) \
        == "cd /home/u/app && agent --resume c0ffee"
    assert cursor.resume_command({"session_id": "k", "cwd": None, "path": "/h/globalStorage/state.vscdb"}) is None


def test_cursor_transcript_lines_it_does_not_know_are_counted(tmp_path):
    f = write_jsonl(tmp_path / "agent-transcripts" / "t1" / "t1.jsonl", [
        ogc_cursor_line("user", {"type": "text", "text": "<user_query>hi</user_query>"}, {"type": "image", "data": "AAAA"}),
        {"type": "turn_ended", "status": "completed"}, {"type": "hologram"},
        ogc_cursor_line("assistant", {"type": "sparkle", "items": []})])
    report = ParseReport()
    PARSERS["cursor"].parse(str(f), report)
    assert report.unknown == {"hologram": 1, "block sparkle": 1}   # images and turn_ended are known


def test_protobuf_reader_reads_the_wire_format_and_refuses_what_is_not():
    data = ogc_pb((1, 300), (2, "héllo"), (3, ogc_pb((1, "inner")))) + b"\x25\x01\x00\x00\x00" + \
        b"\x29" + (7).to_bytes(8, "little")
    assert sesame.protobuf_fields(data) == [(1, 300), (2, "héllo".encode()), (3, b"\x0a\x05inner"), (4, 1), (5, 7)]
    m = sesame.ProtoMessage(data)
    assert m.text(2) == "héllo" and m.message(3).text(1) == "inner" and m.get(9) is None
    assert m.strings() == ["héllo", "inner"]
    for bad in (b"\x0a\x05abc", b"\x08\x80", b"\x0b", b"\x00\x01"):   # short, unfinished varint, group, field 0
        with pytest.raises(ValueError):
            sesame.protobuf_fields(bad)
    assert sesame.ProtoMessage.parse(b"{\"role\": 1}") is None


def test_cursor_transcript_takes_title_and_start_from_the_cli_store(tmp_path):
    ogc_store_db(tmp_path / ".cursor" / "chats" / "abc" / "a1" / "store.db",
             {"agentId": "a1", "name": "Deploy script", "createdAt": 1000000000000})
    f = write_jsonl(tmp_path / ".cursor" / "projects" / "Users-u-app" / "agent-transcripts" / "a1" / "a1.jsonl",
                    [ogc_cursor_line("user", {"type": "text", "text": "hi"})])
    s = parse_file("cursor", f)[0]
    assert s.name == "Deploy script" and s.created == "2001-09-09T01:46:40.000Z"


def test_cursor_list_files_finds_transcripts_and_stores_but_not_other_jsonl(tmp_path):
    cursor = tmp_path / ".cursor"
    t = write_jsonl(cursor / "projects" / "Users-u-app" / "agent-transcripts" / "a1" / "a1.jsonl", [])
    db = ogc_store_db(cursor / "chats" / "abc" / "a1" / "store.db", {"agentId": "a1"})
    write_jsonl(cursor / "projects" / "Users-u-app" / "other.jsonl", [])
    write_jsonl(cursor / "extensions" / "x" / "agent-transcripts" / "z.jsonl", [])
    assert PARSERS["cursor"].list_files(str(cursor)) == sorted([str(db), str(t)])


ogc_VSCDB_SCHEMA = ("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);"
                "CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);")


def ogc_kv(key, value):
    return ("INSERT INTO cursorDiskKV VALUES (?,?)", (key, json.dumps(value)))


def test_cursor_ide_composers_with_bubbles_in_header_order_and_cwd_from_workspace(tmp_path):
    user = tmp_path / "Cursor" / "User"
    db = ogc_make_db(user / "globalStorage" / "state.vscdb", ogc_VSCDB_SCHEMA, [
        ogc_kv("composerData:c1", {"_v": 3, "composerId": "c1", "name": "Refactor auth", "createdAt": 1730000000000,
                               "lastUpdatedAt": 1730000009000,
                               "fullConversationHeadersOnly": [{"bubbleId": "b2", "type": 1}, {"bubbleId": "b1", "type": 2}]}),
        ogc_kv("bubbleId:c1:b1", {"type": 2, "text": "Done, see auth.ts", "thinking": {"text": "split the module"},
                              "toolFormerData": {"name": "edit_file", "rawArgs": "{\"target_file\": \"auth.ts\"}",
                                                 "result": "{\"diff\": \"+export\"}", "status": "completed"}}),
        ogc_kv("bubbleId:c1:b2", {"type": 1, "text": "refactor the auth module"}),
        ogc_kv("bubbleId:c1:b3", {"type": 1, "text": "a reverted prompt not in the headers"}),
        ogc_kv("composerData:c2", {"composerId": "c2", "createdAt": 1730000000000, "fullConversationHeadersOnly": []}),
        ogc_kv("composerData:c3", {"composerId": "c3", "createdAt": 1730000000000, "name": "Old style",
                               "conversation": [{"type": 1, "text": "inline prompt", "workspaceProjectDir": "/w/old"}]}),
    ])
    ogc_make_db(user / "workspaceStorage" / "h1" / "state.vscdb", ogc_VSCDB_SCHEMA, [
        ("INSERT INTO ItemTable VALUES (?,?)",
         ("composer.composerData", json.dumps({"allComposers": [{"composerId": "c1"}]})))])
    write_file(user / "workspaceStorage" / "h1" / "workspace.json", {"folder": "file:///Users/u/my%20app"})
    sessions = {s.session_id: s for s in parse_file("cursor", db)}
    assert sorted(sessions) == ["c1", "c3"]   # c2 is an empty draft
    c1 = sessions["c1"]
    assert c1.name == "Refactor auth" and c1.cwd == "/Users/u/my app"
    assert c1.created == "2024-10-27T03:33:20.000Z" and c1.modified == "2024-10-27T03:33:29.000Z"
    assert kinds(c1) == ["user", "thinking", "assistant", "tool"]
    assert texts(c1, "user") == ["refactor the auth module"]
    assert c1.chunks[3].path == "auth.ts" and "+export" in c1.chunks[3].text
    assert sessions["c3"].cwd == "/w/old" and texts(sessions["c3"], "user") == ["inline prompt"]


def test_cursor_sqlite_of_unknown_schema_is_not_a_session_file(tmp_path):
    db = ogc_make_db(tmp_path / "state.vscdb", "CREATE TABLE ItemTable (key TEXT, value BLOB);")
    with pytest.raises(NotASessionFile):
        parse_file("cursor", db)
    with pytest.raises(NotASessionFile):
        parse_file("cursor", write_file(tmp_path / "x.jsonl", '{"type": "user", "uuid": "1"}\n'))


def test_cursor_samples():
    sessions = sample_sessions("cursor")
    assert len(sessions) == 8
    by_id = {s.session_id: s for s in sessions}
    assert texts(by_id["tests-test-session"], "user") == ["run ls command", "now show me the git status"]
    assert any("git status" in t for t in texts(by_id["tests-test-session"], "tool"))
    assert by_id["a1b2c3d4-e5f6-7890-abcd-ef1234567890"].name == "Test Session"
    assert by_id["child"].parent == "subagent"


def test_cursor_global_storage_root_lists_only_the_editor_db(tmp_path):
    gs = tmp_path / "Cursor" / "User" / "globalStorage"
    db = ogc_make_db(gs / "state.vscdb", ogc_VSCDB_SCHEMA)
    write_jsonl(gs / "some.extension" / "agent-transcripts" / "x.jsonl", [])
    assert PARSERS["cursor"].list_files(str(gs)) == [str(db)]


def test_no_resume_command_is_invented():
    # formats.md shows no resume flag for any of these agents.
    for agent in ("aider", "cline", "amp", "goose", "crush"):
        assert PARSERS[agent].resume_command({"agent": agent, "session_id": "x", "path": "/p", "cwd": "/"}) is None


def test_gemini_and_copilot_resume_a_session_by_its_id():
    # Gemini CLI 0.61 resumes by the session's UUID among the current folder's project's sessions
    # (`--resume {number}, --resume {uuid}, or --resume latest`, its own error text says); Copilot CLI
    # 1.0.102 by the id from any folder (its --help). Neither for a sub-agent, nor for an id that is
    # not the agent's own (a file of an older layout named otherwise).
    sid = "3d743a4f-68bb-4ab3-bd73-61aa8698ab20"
    gemini, copilot = PARSERS["gemini"], PARSERS["copilot"]
    assert gemini.resume_command({"session_id": sid, "cwd": "/home/u/my app", "parent": None}) == \
        "cd '/home/u/my app' && gemini --resume " + sid
    assert copilot.resume_command({"session_id": sid, "cwd": "/home/u/app", "parent": None}) == \
        "cd /home/u/app && copilot --resume " + sid
    assert copilot.resume_command({"session_id": sid, "cwd": None, "parent": None}) == "copilot --resume " + sid
    assert gemini.resume_command({"session_id": sid, "cwd": None, "parent": None}) is None   # (which project?)
    for parser in (gemini, copilot):
        assert parser.resume_command({"session_id": sid, "cwd": "/a", "parent": "p"}) is None
        assert parser.resume_command({"session_id": "session-2026-01-01", "cwd": "/a", "parent": None}) is None


# -------------------------------------------------------------------------------------------------
# Aider
# -------------------------------------------------------------------------------------------------

am_AIDER_HISTORY = """
# aider chat started at 2025-06-02 11:47:49

> Aider v0.84.0  
> ^C KeyboardInterrupt  

# aider chat started at 2025-06-02 11:49:34

> Aider v0.84.0  
> Model: qwen3 with diff edit format  
> Cur working dir: /home/u/proj/pkg  

#### Fix the flaky retry loop  
#### in the uploader  

<thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>
The backoff never resets.
</thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>

Here is the fix:

```
> not a tool line, just quoted code
#### not a user line either
```

> Applied edit to src/uploader.py  
> Commit 54d022e fix: reset backoff  

#### /run pytest -q  

> 3 passed in 0.2s  

# aider chat started at 2025-06-03 09:00:00

#### second run question  

Answer two.
"""


def test_aider_one_file_holds_many_sessions_and_empty_runs_are_dropped(tmp_path):
    path = write_file(tmp_path / ".aider.chat.history.md", am_AIDER_HISTORY)
    sessions = parse_file("aider", path)
    assert len(sessions) == 2   # the banner-only run is not a session
    first, second = sessions
    assert first.created == norm_time("2025-06-02 11:49:34") and first.created.endswith("Z")
    assert first.modified == first.created
    assert second.created == norm_time("2025-06-03 09:00:00")
    assert second.modified >= second.created      # the last run lasts until the file was written
    assert first.session_id != second.session_id
    assert [s.session_id for s in parse_file("aider", path)] == [first.session_id, second.session_id]  # stable


def test_aider_kinds_user_thinking_fences_and_tool_output(tmp_path):
    s = parse_file("aider", write_file(tmp_path / ".aider.chat.history.md", am_AIDER_HISTORY))[0]
    assert texts(s, "user") == ["Fix the flaky retry loop\nin the uploader", "/run pytest -q"]
    assert texts(s, "thinking") == ["The backoff never resets."]
    reply = texts(s, "assistant")[0]
    assert "> not a tool line" in reply and "#### not a user line" in reply and "thinking-content" not in reply
    banner = texts(s, "context")[0]
    assert "Aider v0.84.0" in banner      # the start-up banner is context, never the user
    tools = [c for c in s.chunks if c.kind == "tool"]
    assert tools[0].path == "src/uploader.py" and "Commit 54d022e" in tools[0].text
    assert tools[1].tool == "run" and "3 passed" in tools[1].text


# What aider 0.86.2 writes for `/run`, `!` and a command the model suggested (aider ran it).
am_AIDER_RUNS = """
# aider chat started at 2026-11-25 02:06:51

> Aider v0.86.2  
> Model: openai/mock-model with diff edit format  

#### /run echo fail-x; exit 3  
> Add 0.0k tokens of command output to the chat? (Y)es/(N)o [Yes]: y  
> Added 1 line of output to the chat.  

#### !seq 1 5 | sed s/^/row-/  
> Add 0.0k tokens of command output to the chat? (Y)es/(N)o [Yes]: y  
> Added 5 lines of output to the chat.  

#### Check the canary  

To check, run this command:

```bash
echo canary-3
```

> Tokens: 2.3k sent, 27 received.  
> echo canary-3  
> Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]: y  
> Running echo canary-3  
> Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y  
> Added 2 lines of output to the chat.  
"""


def test_aider_run_and_bang_and_suggested_commands_are_shell_calls(tmp_path):
    [s] = parse_file("aider", write_file(tmp_path / ".aider.chat.history.md", am_AIDER_RUNS))
    runs = [c for c in s.chunks if c.kind == "tool" and c.tool == "run"]
    assert [c.text.split("\n")[1] for c in runs] == [
        "command: echo fail-x; exit 3", "command: seq 1 5 | sed s/^/row-/", "command: echo canary-3"]
    assert "Added 5 lines of output to the chat." in runs[1].text
    assert texts(s, "user") == ["/run echo fail-x; exit 3", "!seq 1 5 | sed s/^/row-/", "Check the canary"]
    assert "run" in sesame.tool_family("bash") and "run" in sesame.tool_family("shell")


def test_aider_earlier_run_keeps_its_last_prompt_time_after_a_new_run_is_appended(tmp_path):
    path = write_file(tmp_path / ".aider.chat.history.md", am_AIDER_RUNS)
    write_file(tmp_path / ".aider.input.history", "\n# 2026-11-25 02:06:52.104711\n+/run echo fail-x; exit 3\n"
             "\n# 2026-11-25 02:07:10.500000\n+!seq 1 5 | sed s/^/row-/\n"
             "\n# 2026-11-25 02:09:30.250000\n+Check the canary\n"
             "\n# 2026-11-26 08:00:05.000000\n+next day\n")
    with open(path, "a") as f:
        f.write("\n# aider chat started at 2026-11-26 08:00:00\n\n#### next day  \n\nHello again.\n")
    first, second = parse_file("aider", path)
    assert first.created == norm_time("2026-11-25 02:06:51")
    assert first.modified == norm_time("2026-11-25 02:09:30.250000") > first.created
    assert [c.ts for c in first.chunks if c.kind == "user"] == [
        norm_time("2026-11-25 02:06:52.104711"), norm_time("2026-11-25 02:07:10.5"), norm_time("2026-11-25 02:09:30.25")]
    assert second.created == norm_time("2026-11-26 08:00:00") and second.modified >= norm_time("2026-11-26 08:00:05")


def test_aider_last_session_of_a_cloned_repo_is_dated_by_its_last_prompt_not_the_checkout(tmp_path):
    # A clone (or copy) writes the history file now: its time is not when the session was active.
    path = write_file(tmp_path / ".aider.chat.history.md",
                      "\n# aider chat started at 2025-12-03 14:43:00\n\n> Aider v0.85.2  \n> Main model: x  \n\n"
                      "#### add the metadata field  \n\nDone.\n\n#### and a test  \n\nAdded.\n")
    write_file(tmp_path / ".aider.input.history", "\n# 2025-12-03 14:44:10.000000\n+add the metadata field\n"
                                                   "\n# 2025-12-03 21:29:05.500000\n+and a test\n")
    report = ParseReport()
    [s] = PARSERS["aider"].parse(str(path), report)
    assert s.created == norm_time("2025-12-03 14:43:00") and s.modified == norm_time("2025-12-03 21:29:05.5")
    assert report.versions == {"0.85.2"}
    os.remove(tmp_path / ".aider.input.history")   # no dated prompt: the file's time is all there is
    [s] = parse_file("aider", path)
    assert s.modified == sesame.file_mtime_iso(str(path))


def test_aider_cwd_is_recorded_dir_else_the_file_folder(tmp_path):
    path = write_file(tmp_path / "repo" / ".aider.chat.history.md", am_AIDER_HISTORY)
    first, second = parse_file("aider", path)
    assert first.cwd == "/home/u/proj/pkg"
    assert second.cwd == str(tmp_path / "repo")


def test_aider_other_markdown_is_not_a_session(tmp_path):
    with pytest.raises(NotASessionFile):
        parse_file("aider", write_file(tmp_path / "notes.aider.chat.history.md", "# Notes\n\nhello\n"))


def test_aider_list_files_bounded_walk(tmp_path):
    write_file(tmp_path / "a" / ".aider.chat.history.md", am_AIDER_HISTORY)
    write_file(tmp_path / "a" / ".aider.input.history", "# 2025\n+hi\n")
    write_file(tmp_path / "a" / "node_modules" / "x" / ".aider.chat.history.md", am_AIDER_HISTORY)
    write_file(tmp_path / ".hidden" / ".aider.chat.history.md", am_AIDER_HISTORY)
    write_file(tmp_path / "b" / "c" / ".aider.chat.history.md", am_AIDER_HISTORY)
    found = PARSERS["aider"].list_files(str(tmp_path))
    assert found == [str(tmp_path / "a" / ".aider.chat.history.md"), str(tmp_path / "b" / "c" / ".aider.chat.history.md")]
    assert PARSERS["aider"].default_roots({"HOME": str(tmp_path)}) == []


def test_aider_samples():
    sessions = sample_sessions("aider")
    users = [t for s in sessions for t in texts(s, "user")]
    assert "What can you say about this package?" in users
    assert any(c.kind == "thinking" for s in sessions for c in s.chunks)
    with pytest.raises(NotASessionFile):
        parse_file("aider", os.path.join(SAMPLES, "aider", "mozgoslav.aider.input.history"))


# -------------------------------------------------------------------------------------------------
# SpecStory
# -------------------------------------------------------------------------------------------------

ss_OLD = """<!-- Generated by SpecStory -->

# Flaky upload test (2025-03-21 18:16:34)

_**User**_

why does test_upload fail on CI

```
pasted log without a closing fence

---

_**Assistant**_

---

Let me look at the test.

---

<details>
            <summary>Listed directory tests • **2** results</summary>

| Name |
|-------|
| `test_upload.py` |

</details>

---

The upload uses a fixed port; CI runs tests in parallel.

---

_**User**_

use an ephemeral port then

---
"""

ss_NEW = """<!-- Generated by SpecStory, Markdown v2.1.0 -->

# 2026-07-13 13:40:49Z

<!-- Claude Code Session 5c7d5c23-0691-4467-b98e-0fb865b4a639 (2026-07-13 13:40:49Z) -->

_**User (2026-07-13 13:40:49Z)**_

fix the flaky websocket reconnect

---

_**Agent (claude-opus-4-8 2026-07-13 13:40:56Z)**_

<think><details><summary>Thought Process</summary>
The backoff timer is never reset.
</details></think>

I'll read the client.

_**Agent (claude-opus-4-8 2026-07-13 13:41:05Z)**_

<tool-use data-tool-type="read" data-tool-name="Read"><details>
<summary>Tool use: **Read** • Read file: src/ws_client.py</summary>

```python
---
def reconnect(): ...
```
</details></tool-use>

Reset the backoff in reconnect().
"""


def test_specstory_turns_times_tools_and_title_in_both_export_generations(tmp_path):
    hist = tmp_path / "shop" / ".specstory" / "history"
    old = parse_file("specstory", write_file(hist / "2025-03-21_21-16-flaky-upload-test.md", ss_OLD))[0]
    assert old.name == "Flaky upload test" and old.cwd == str(tmp_path / "shop")
    assert old.created == "2025-03-21T21:16:00.000Z"      # the file name's UTC time, not the title's local one
    assert texts(old, "user")[0].startswith("why does test_upload fail on CI")
    assert texts(old, "user")[-1] == "use an ephemeral port then"   # the unclosed fence did not swallow the turns
    assert texts(old, "assistant") == ["Let me look at the test.", "The upload uses a fixed port; CI runs tests in parallel."]
    (listing,) = [c for c in old.chunks if c.kind == "tool"]
    assert "Listed directory tests" in listing.text and "test_upload.py" in listing.text

    new = parse_file("specstory", write_file(hist / "2026-07-13_13-40-49Z-fix-the-flaky.md", ss_NEW))[0]
    assert new.name is None                                # the title is only a time
    assert (new.created, new.modified) == ("2026-07-13T13:40:49.000Z", "2026-07-13T13:41:05.000Z")
    assert texts(new, "user") == ["fix the flaky websocket reconnect"]
    assert texts(new, "thinking") == ["The backoff timer is never reset."]
    assert texts(new, "assistant") == ["I'll read the client.", "Reset the backoff in reconnect()."]
    (read,) = [c for c in new.chunks if c.kind == "tool"]
    assert read.tool == "Read" and read.path == "src/ws_client.py" and "def reconnect" in read.text
    assert [c.ts for c in new.chunks if c.kind == "tool"] == ["2026-07-13T13:41:05.000Z"]
    assert old.session_id != new.session_id
    with pytest.raises(NotASessionFile):
        parse_file("specstory", write_file(hist / "notes.md", "# Notes\n\nnothing here\n"))


def test_specstory_history_is_found_inside_configured_project_folders(env, tmp_path, capsys):
    code = tmp_path / "code"
    write_file(code / "shop" / ".specstory" / "history" / "2025-03-21_21-16-flaky-upload-test.md", ss_OLD)
    write_file(code / "shop" / ".specstory" / ".what-is-this.md", "# SpecStory\n\n_**User**_ explained\n")
    write_file(code / "shop" / "docs" / "history" / "x.md", ss_OLD)
    write_file(code / "shop" / "node_modules" / "p" / ".specstory" / "history" / "y.md", ss_OLD)
    assert PARSERS["specstory"].list_files(str(code)) == [
        str(code / "shop" / ".specstory" / "history" / "2025-03-21_21-16-flaky-upload-test.md")]
    assert PARSERS["specstory"].default_roots({"HOME": str(tmp_path)}) == []
    write_config({"sources": [{"parser": "specstory", "path": str(code)}]}, tmp_path)
    run(capsys, "index")
    code_, out, err = run(capsys, "search", "ephemeral port", "--json")
    (r,) = json.loads(out)["results"]
    assert r["agent"] == "specstory" and r["name"] == "Flaky upload test" and r["cwd"] == str(code / "shop")


# -------------------------------------------------------------------------------------------------
# Cline / Roo Code / Kilo Code
# -------------------------------------------------------------------------------------------------

am_ENV = "<environment_details>\n# VSCode Visible Files\nsrc/a.ts\n\n# Current Working Directory (/home/u/webapp) Files\nsrc/\n</environment_details>"
am_UI_MESSAGES = [
    {"ts": 1735000000000, "type": "say", "say": "task", "text": "Add a dark mode toggle", "images": []},
    {"ts": 1735000001000, "type": "say", "say": "api_req_started",
     "text": json.dumps({"request": "<task>\nAdd a dark mode toggle\n</task>\n\n" + am_ENV, "tokensIn": 10})},
    {"ts": 1735000002000, "type": "say", "say": "reasoning", "text": "Need the theme context first."},
    {"ts": 1735000003000, "type": "say", "say": "text", "text": "I'll read the theme file."},
    {"ts": 1735000004000, "type": "ask", "ask": "tool", "text": json.dumps({"tool": "readFile", "path": "src/theme.ts", "content": "/home/u/webapp/src/theme.ts"})},
    {"ts": 1735000005000, "type": "say", "say": "tool", "text": json.dumps({"tool": "readFile", "path": "src/theme.ts", "content": "/home/u/webapp/src/theme.ts"})},
    {"ts": 1735000006000, "type": "ask", "ask": "command", "text": "npm test"},
    {"ts": 1735000007000, "type": "ask", "ask": "command_output", "text": "ECONNREFUSED 127.0.0.1:5432"},
    {"ts": 1735000008000, "type": "say", "say": "user_feedback", "text": "use the CSS variables instead", "images": ["data:image/png;base64,AAAA"]},
    {"ts": 1735000009000, "type": "say", "say": "completion_result", "text": "Dark mode toggle added."},
    {"ts": 1735000010000, "type": "ask", "ask": "completion_result", "text": "Dark mode toggle added."},
    {"ts": 1735000011000, "type": "say", "say": "checkpoint_created"},
]


def test_cline_ui_messages_kinds_cwd_times_and_dedupe(tmp_path):
    task = tmp_path / "tasks" / "1735000000000"
    path = write_file(task / "ui_messages.json", json.dumps(am_UI_MESSAGES))
    s = parse_file("cline", path)[0]
    assert s.session_id == "1735000000000" and s.name is None
    assert s.cwd == "/home/u/webapp"
    assert s.created == "2024-12-24T00:26:40.000Z" and s.modified == "2024-12-24T00:26:51.000Z"
    assert texts(s, "user") == ["Add a dark mode toggle", "use the CSS variables instead"]
    assert texts(s, "thinking") == ["Need the theme context first."]
    assert texts(s, "assistant") == ["I'll read the theme file.", "Dark mode toggle added."]  # completion once
    tools = [c for c in s.chunks if c.kind == "tool"]
    assert len(tools) == 2                                  # ask + say of one tool use -> one chunk
    assert tools[0].tool == "readFile" and tools[0].path == "src/theme.ts"
    assert tools[1].tool == "execute_command" and "npm test" in tools[1].text and "ECONNREFUSED" in tools[1].text
    assert not any("base64" in c.text for c in s.chunks)
    assert not any("environment_details" in c.text for c in s.chunks)


def test_cline_task_opened_as_say_text_is_the_users_and_tool_lines_name_the_file(tmp_path):
    # Cline and Roo Code write the task as say "text" before the first request (not say "task").
    records = [
        {"ts": 1735000000000, "type": "say", "say": "text", "text": "Why does the invoice parser drop VAT?",
         "images": [], "files": []},
        {"ts": 1735000000500, "type": "say", "say": "checkpoint_created"},
        {"ts": 1735000001000, "type": "say", "say": "api_req_started", "text": json.dumps({"request": "<task>..."})},
        {"ts": 1735000002000, "type": "say", "say": "text", "text": "Reading the parser."},
        {"ts": 1735000003000, "type": "say", "say": "tool",
         "text": json.dumps({"tool": "readFile", "path": "lib/invoice.dart", "content": "/w/lib/invoice.dart"})},
        {"ts": 1735000004000, "type": "ask", "ask": "use_mcp_server",
         "text": json.dumps({"type": "use_mcp_tool", "serverName": "gh", "toolName": "get_issue", "arguments": "{\"n\": 7}"})},
    ]
    s = parse_file("cline", write_file(tmp_path / "tasks" / "1" / "ui_messages.json", records))[0]
    assert texts(s, "user") == ["Why does the invoice parser drop VAT?"]
    assert texts(s, "assistant") == ["Reading the parser."]
    read, mcp = [c for c in s.chunks if c.kind == "tool"]
    assert read.tool == "readFile" and read.path == "lib/invoice.dart"
    assert sesame.collapse("tool", read.text) == "lib/invoice.dart"   # what `show` prints after the name
    assert "tool: readFile" not in read.text.split("\n", 1)[1]
    assert mcp.tool == "get_issue" and '"n": 7' in mcp.text and "toolName" not in mcp.text


def test_cline_api_history_only_task_wrapper_is_not_user_text(tmp_path):
    history = [
        {"role": "user", "content": [{"type": "text", "text": "<task>\nRename the config loader\n</task>"},
                                     {"type": "text", "text": am_ENV}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Renaming it now."},
                                          {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "cfg.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "def load(): pass"}]},
                                     {"type": "text", "text": am_ENV}]},
    ]
    path = write_file(tmp_path / "tasks" / "42" / "api_conversation_history.json", json.dumps(history))
    s = parse_file("cline", path)[0]
    assert texts(s, "user") == ["Rename the config loader"]
    assert s.cwd == "/home/u/webapp"
    tool = [c for c in s.chunks if c.kind == "tool"]
    assert len(tool) == 1 and "def load(): pass" in tool[0].text and tool[0].path == "cfg.py"
    assert not any("Current Working Directory" in c.text for c in s.chunks)


def test_cline_roo_subtask_points_to_parent_and_lists_one_file_per_task(tmp_path):
    root = tmp_path / "rooveterinaryinc.roo-cline" / "tasks"
    write_file(root / "child" / "ui_messages.json", json.dumps(am_UI_MESSAGES[:3]))
    write_file(root / "child" / "api_conversation_history.json", "[]")
    write_file(root / "child" / "history_item.json", json.dumps({"id": "child", "parentTaskId": "parent", "workspace": "/w"}))
    write_file(root / "old" / "api_conversation_history.json", "[]")
    files = PARSERS["cline"].list_files(str(root))
    assert files == [str(root / "child" / "ui_messages.json"), str(root / "old" / "api_conversation_history.json")]
    s = parse_file("cline", root / "child" / "ui_messages.json")[0]
    assert s.parent == "parent" and s.cwd == "/home/u/webapp"   # the recorded request wins over the index


def test_cline_default_roots_find_all_three_extensions(tmp_path):
    gs = tmp_path / ".config" / "Code" / "User" / "globalStorage"
    for ext in ("saoudrizwan.claude-dev", "kilocode.kilo-code"):
        (gs / ext / "tasks").mkdir(parents=True)
    (tmp_path / "Library" / "Application Support" / "Cursor" / "User" / "globalStorage" / "rooveterinaryinc.roo-cline" / "tasks").mkdir(parents=True)
    roots = PARSERS["cline"].default_roots({"HOME": str(tmp_path)})
    assert len(roots) == 3 and all(r.endswith("tasks") for r in roots)


def test_cline_other_json_is_not_a_task(tmp_path):
    with pytest.raises(NotASessionFile):
        parse_file("cline", write_file(tmp_path / "t" / "ui_messages.json", json.dumps([{"role": "user", "content": "x"}])))


def test_cline_sdk_session_user_input_unwrapped_commands_and_manifest(tmp_path):
    # As Cline CLI 3.0.65 writes ~/.cline/data/sessions/<id>/: the messages and the manifest beside them.
    folder = tmp_path / "sessions" / "1795484309604_nyc35"
    messages = {"version": 1, "agent": "lead", "sessionId": "1795484309604_nyc35",
                "origin": {"source": "cli", "mode": "user", "version": "3.0.65"}, "system_prompt": "You are Cline",
                "messages": [
        {"id": "u1", "role": "user", "ts": 1795484309900, "content": [
            {"type": "text", "text": '<user_input mode="act">Now a failing one: run `echo failing-cline; exit 3`</user_input>'}]},
        {"id": "a1", "role": "assistant", "ts": 1795484310000, "content": [
            {"type": "tool_use", "id": "call_07", "name": "run_commands", "input": {"commands": ["echo failing-cline; exit 3"]}}]},
        {"id": "u2", "role": "user", "ts": 1795484310200, "content": [
            {"type": "tool_result", "tool_use_id": "call_07", "name": "run_commands", "content": [
                {"query": "echo failing-cline; exit 3", "result": "[Command exited with code 3]\nfailing-cline\n",
                 "error": "Command exited with code 3", "success": False}]}]},
        {"id": "a2", "role": "assistant", "ts": 1795484310300, "content": [{"type": "text", "text": "It failed with code 3."}]}]}
    path = write_file(folder / "1795484309604_nyc35.messages.json", json.dumps(messages))
    manifest = {"session_id": "1795484309604_nyc35", "cwd": "/tmp/proj", "started_at": "2026-11-24T01:38:29.610Z",
                "ended_at": "2026-11-24T01:38:30.402Z", "status": "completed",
                "prompt": '<user_input mode="act">Now a failing one: run `echo failing-cline; exit 3`</user_input>',
                "metadata": {"title": "Now a failing one: run `echo failing-cline; exit 3`",
                             "systemPrompt": "You are Cline, an AI coding agent."}}
    write_file(folder / "1795484309604_nyc35.json", json.dumps(manifest))
    assert PARSERS["cline"].list_files(str(tmp_path / "sessions")) == [str(path)]
    assert PARSERS["cline"].sidecars(str(path)) == [str(folder / "1795484309604_nyc35.json")]
    report = ParseReport()
    [s] = PARSERS["cline"].parse(str(path), report)
    assert (s.session_id, s.cwd, s.name) == ("1795484309604_nyc35", "/tmp/proj", None)   # the title is the prompt
    assert texts(s, "user") == ["Now a failing one: run `echo failing-cline; exit 3`"]
    [tool] = [c for c in s.chunks if c.kind == "tool"]
    assert tool.tool == "run_commands" and "error:" in tool.text and "Command exited with code 3" in tool.text
    assert texts(s, "assistant") == ["It failed with code 3."]
    assert s.created == "2026-11-24T01:38:29.610Z" and s.modified == "2026-11-24T01:38:30.402Z"
    assert report.versions == {"3.0.65"} and not report.unknown
    assert not any("You are Cline" in c.text for c in s.chunks)
    manifest["metadata"]["title"] = "Exit codes"   # a title that is not the prompt is a name
    write_file(folder / "1795484309604_nyc35.json", json.dumps(manifest))
    assert parse_file("cline", path)[0].name == "Exit codes"


def test_cline_sdk_sessions_folder_is_a_default_root(tmp_path):
    (tmp_path / ".cline" / "data" / "sessions").mkdir(parents=True)
    assert PARSERS["cline"].default_roots({"HOME": str(tmp_path)}) == [str(tmp_path / ".cline" / "data" / "sessions")]


def test_cline_unknown_message_kinds_are_counted_for_the_drift_report(tmp_path):
    rows = am_UI_MESSAGES[:2] + [{"ts": 1735000012000, "type": "say", "say": "hologram", "text": "?"}]
    report = ParseReport()
    PARSERS["cline"].parse(str(write_file(tmp_path / "t" / "1" / "ui_messages.json", json.dumps(rows))), report)
    assert report.unknown == {"say hologram": 1}   # api_req_started and the rest are skipped on purpose


def am_kilo_db(path):
    """kilo.db as Kilo CLI 7.7.9 writes it: OpenCode's schema; `run` keeps the prompt in quotes."""
    rows = [("INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
             ("ses_df4d0df1cffetirRruEbdqdRk1", "global", None, "sunny-orchid", "/tmp/st/kilo/proj",
              "Kilo renamed walrus", "7.7.9", 1795483967715, 1795483973382)),
            ("INSERT INTO message VALUES (?,?,?,?,?)", ("msg_1", "ses_df4d0df1cffetirRruEbdqdRk1", 1795483971532,
             1795483971532, json.dumps({"role": "user", "time": {"created": 1795483971532}, "agent": "code"}))),
            ("INSERT INTO message VALUES (?,?,?,?,?)", ("msg_2", "ses_df4d0df1cffetirRruEbdqdRk1", 1795483972260,
             1795483972260, json.dumps({"role": "assistant", "time": {"created": 1795483972260},
                                        "path": {"cwd": "/tmp/st/kilo/proj"}})))]
    parts = [("prt_1", "msg_1", {"type": "text", "text": '"Second session about walruses, run `echo walrus-two`"'}),
             ("prt_2", "msg_2", {"type": "step-start", "snapshot": "4b82"}),
             ("prt_3", "msg_2", {"type": "tool", "tool": "bash", "callID": "call_ad", "state": {
                 "status": "completed", "input": {"command": "echo walrus-two"}, "output": "walrus-two\n",
                 "metadata": {"exit": 0, "truncated": False}}}),
             ("prt_4", "msg_2", {"type": "text", "text": "Done with the walrus."})]
    for pid, mid, data in parts:
        rows.append(("INSERT INTO part VALUES (?,?,?,?,?,?)",
                     (pid, mid, "ses_df4d0df1cffetirRruEbdqdRk1", 0, 0, json.dumps(data))))
    return ogc_make_db(path, ogc_OPENCODE_SCHEMA, rows)


def test_kilo_db_sessions_are_kilo_sessions_with_version_and_resume_command(tmp_path):
    db = am_kilo_db(tmp_path / ".local" / "share" / "kilo" / "kilo.db")
    (tmp_path / ".local" / "share" / "kilo" / "opencode.db").write_text("")   # not Kilo's: not listed
    kilo = PARSERS["kilo"]
    [root] = kilo.default_roots({"HOME": str(tmp_path)})
    assert kilo.list_files(root) == [str(db)] and kilo.sidecars(str(db)) == [str(db) + "-wal"]
    report = ParseReport()
    [s] = kilo.parse(str(db), report)
    assert (s.agent, s.session_id, s.name, s.cwd) == ("kilo", "ses_df4d0df1cffetirRruEbdqdRk1", "Kilo renamed walrus",
                                                      "/tmp/st/kilo/proj")
    assert texts(s, "user") == ['"Second session about walruses, run `echo walrus-two`"']
    assert [c.tool for c in s.chunks if c.kind == "tool"] == ["bash"]
    assert report.versions == {"7.7.9"}
    assert kilo.resume_command({"session_id": s.session_id}) == "kilo -s ses_df4d0df1cffetirRruEbdqdRk1"
    assert kilo.default_roots({"XDG_DATA_HOME": "/x", "KILO_DB": "kilo-beta.db"}) == ["/x/kilo", "/x/kilo/kilo-beta.db"]


# -------------------------------------------------------------------------------------------------
# GitHub Copilot CLI
# -------------------------------------------------------------------------------------------------

def am_copilot_events():
    def ev(i, etype, data, ts):
        return {"type": etype, "data": data, "id": "e%d" % i, "timestamp": "2026-03-26T17:50:%02d.000Z" % ts, "parentId": None}
    return [
        ev(1, "session.start", {"sessionId": "sid-1", "copilotVersion": "1.0.11", "startTime": "2026-03-26T17:50:00.000Z",
                                "context": {"cwd": "/home/u/api"}}, 0),
        ev(2, "system.message", {"content": "You are GitHub Copilot SYSTEMPROMPT", "role": "system"}, 1),
        ev(3, "user.message", {"content": "why does the migration hang", "transformedContent": "<ctx>why does the migration hang</ctx>"}, 2),
        ev(4, "assistant.reasoning", {"content": "Check the lock table."}, 3),
        ev(5, "tool.execution_start", {"toolCallId": "c1", "toolName": "bash", "arguments": {"command": "psql -c 'select 1'"}}, 4),
        ev(6, "assistant.message", {"content": "Checking locks.", "reasoningText": "Check the lock table.",
                                    "toolRequests": [{"toolCallId": "c1", "name": "bash", "arguments": "{\"command\": \"psql -c 'select 1'\"}"}]}, 5),
        ev(7, "tool.execution_complete", {"toolCallId": "c1", "success": False, "result": {"content": "deadlock detected"}}, 6),
        ev(8, "subagent.started", {"toolCallId": "task-9", "agentName": "explore", "agentDisplayName": "Explore agent"}, 7),
        ev(9, "assistant.message", {"parentToolCallId": "task-9", "content": "Scanning migrations folder", "toolRequests": []}, 8),
        ev(10, "assistant.message", {"content": "A migration holds a lock.", "toolRequests": []}, 9),
    ]


def test_copilot_events_merge_tool_call_and_index_each_text_once(tmp_path):
    folder = tmp_path / "session-state" / "sid-1"
    path = write_jsonl(folder / "events.jsonl", am_copilot_events())
    write_file(folder / "workspace.yaml", "id: sid-1\nname: \"Migration hang\"\nsummary: x\n")
    sessions = parse_file("copilot", path)
    main = sessions[0]
    assert main.session_id == "sid-1" and main.cwd == "/home/u/api" and main.name == "Migration hang"
    assert main.created == "2026-03-26T17:50:00.000Z" and main.modified == "2026-03-26T17:50:09.000Z"
    assert texts(main, "user") == ["why does the migration hang"]
    assert texts(main, "thinking") == ["Check the lock table."]           # reasoning event + reasoningText: once
    tools = [c for c in main.chunks if c.kind == "tool"]
    assert len(tools) == 1 and "deadlock detected" in tools[0].text and "error:" in tools[0].text
    assert not any("SYSTEMPROMPT" in c.text for c in main.chunks)
    assert "Scanning migrations folder" not in texts(main, "assistant")


def test_copilot_injected_blocks_are_context_once_and_the_typed_text_is_the_users_once(tmp_path):
    # VS Code's agent writing this format appends a reminder, the attachments and the request again.
    def turn(i, typed):
        content = (typed + "\n <reminder>\nIMPORTANT: this context may or may not be relevant\n</reminder>\n"
                   "<attachments>\n<attachment id=\"acme/shop\">\nRepository name: shop\nCurrent branch: main\n"
                   "</attachment>\n\n</attachments>\n<userRequest>\n" + typed + "\n</userRequest>\n")
        return {"type": "user.message", "data": {"content": content, "transformedContent": "<x>" + content},
                "id": "e%d" % i, "timestamp": "2026-03-29T22:35:0%d.000Z" % i}
    path = write_jsonl(tmp_path / "sid" / "events.jsonl", [
        {"type": "session.start", "data": {"sessionId": "sid"}, "id": "e0", "timestamp": "2026-03-29T22:35:00.000Z"},
        turn(1, "Rename the checkout button"), turn(2, "Now make it green")])
    s = parse_file("copilot", path)[0]
    assert texts(s, "user") == ["Rename the checkout button", "Now make it green"]
    context = texts(s, "context")
    assert len(context) == 1 and "<attachments>" in context[0] and "Current branch: main" in context[0]
    assert not any("userRequest" in c.text or "IMPORTANT" in c.text for c in s.chunks if c.kind == "user")


@pytest.mark.parametrize("yaml_text, name", [
    ('summary: "Fix the login\\r\n\n  \\r\n\n  redirect loop \\"now\\"\n  please"\nsummary_count: 0\n',
     "Fix the login"),
    ('summary: "Fix the \\"login\\"\n    redirect\\u00e9 loop"\n', 'Fix the "login" redirect\u00e9 loop'),
    ("id: x\nsummary: |-\n  Fix the following issues.\n\n  - Verify each finding\ncreated_at: 2026-04-02\n",
     "Fix the following issues."),
    ("summary: 'It''s the flaky\n  upload test'\n", "It's the flaky upload test"),
    ("summary: plain words here\nname: Renamed by the user\n", "Renamed by the user"),
])
def test_copilot_workspace_summary_names_the_session_and_a_rename_wins(tmp_path, yaml_text, name):
    folder = tmp_path / "session-state" / "sid"
    path = write_jsonl(folder / "events.jsonl", [
        {"type": "user.message", "data": {"content": "hello"}, "id": "e1", "timestamp": "2026-03-29T22:35:00.000Z"}])
    write_file(folder / "workspace.yaml", yaml_text)
    assert parse_file("copilot", path)[0].name == name
    assert PARSERS["copilot"].sidecars(path) == [str(folder / "workspace.yaml")]


def test_copilot_subagent_events_form_a_child_session(tmp_path):
    sessions = parse_file("copilot", write_jsonl(tmp_path / "sid-1.jsonl", am_copilot_events()))
    assert len(sessions) == 2
    child = sessions[1]
    assert child.parent == "sid-1" and child.session_id == "sid-1/task-9" and child.name == "Explore agent"
    assert texts(child, "assistant") == ["Scanning migrations folder"]


def test_copilot_cwd_from_folder_trust_and_id_from_file_name(tmp_path):
    path = write_jsonl(tmp_path / "abc.jsonl", [
        {"type": "session.info", "data": {"infoType": "folder_trust", "message": "Folder /tmp/x has been added to trusted folders."},
         "id": "e1", "timestamp": "2025-12-18T22:00:01.000Z"},
        {"type": "user.message", "data": {"content": "hello"}, "id": "e2", "timestamp": "2025-12-18T22:00:02.000Z"}])
    s = parse_file("copilot", path)[0]
    assert s.session_id == "abc" and s.cwd == "/tmp/x"


def test_copilot_legacy_history_and_roots(tmp_path):
    path = write_file(tmp_path / "history-session-state" / "old.json", json.dumps(
        {"sessionId": "old-1", "workspacePath": "/w", "history": [
            {"role": "human", "content": "legacy prompt", "time": 1700000000000},
            {"role": "assistant", "result": "legacy answer", "time": 1700000005000}]}))
    s = parse_file("copilot", path)[0]
    assert (s.session_id, s.cwd, texts(s, "user"), texts(s, "assistant")) == ("old-1", "/w", ["legacy prompt"], ["legacy answer"])
    assert s.created == "2023-11-14T22:13:20.000Z"
    roots = PARSERS["copilot"].default_roots({"HOME": "/h", "COPILOT_HOME": str(tmp_path)})
    assert roots[0] == os.path.join(str(tmp_path), "session-state")
    state = tmp_path / "session-state"
    write_jsonl(state / "flat.jsonl", am_copilot_events())
    write_jsonl(state / "sid-1" / "events.jsonl", am_copilot_events())
    write_jsonl(state / "sid-1" / "other.jsonl", [])
    assert PARSERS["copilot"].list_files(str(state)) == [str(state / "flat.jsonl"), str(state / "sid-1" / "events.jsonl")]


def test_copilot_samples():
    sessions = sample_sessions("copilot")
    assert any("List the files" in t for s in sessions for t in texts(s, "user"))
    assert any("printf" in c.text for s in sessions for c in s.chunks if c.kind == "tool")


# -------------------------------------------------------------------------------------------------
# Amp
# -------------------------------------------------------------------------------------------------

def test_amp_thread_title_cwd_tools_and_times(tmp_path):
    thread = {
        "v": 12, "id": "T-0001", "title": "Fix CI cache", "created": 1767865803494,
        "env": {"initial": {"trees": [{"displayName": "my app", "uri": "file:///home/u/my%20app"}]}},
        "messages": [
            {"role": "user", "messageId": 0, "content": [{"type": "text", "text": "the CI cache never hits"}],
             "meta": {"sentAt": 1767865804000}},
            {"role": "assistant", "messageId": 1, "content": [
                {"type": "thinking", "thinking": "look at the cache key"},
                {"type": "text", "text": "Let me look at the workflow."},
                {"type": "tool_use", "id": "tu1", "name": "Read", "input": {"path": ".github/workflows/ci.yml"}}],
             "usage": {"model": "x", "timestamp": "2026-01-08T09:50:10.000Z"}},
            {"role": "user", "messageId": 2, "content": [
                {"type": "tool_result", "toolUseID": "tu1", "run": {"status": "done", "result": "key: ${{ hashFiles('lock') }}"}}],
             "meta": {"sentAt": 1767865811000}},
            {"role": "info", "messageId": 3, "content": [{"type": "summary", "summary": {"type": "message", "summary": "Cache key fixed"}}]},
        ]}
    s = parse_file("amp", write_file(tmp_path / "T-0001.json", json.dumps(thread)))[0]
    assert (s.session_id, s.name, s.cwd) == ("T-0001", "Fix CI cache", "/home/u/my app")
    assert s.created == "2026-01-08T09:50:03.494Z" and s.modified == "2026-01-08T09:50:11.000Z"
    assert kinds(s) == ["user", "thinking", "assistant", "tool", "summary"]
    tool = s.chunks[3]
    assert tool.path == ".github/workflows/ci.yml" and "hashFiles" in tool.text


def test_amp_rejects_other_json(tmp_path):
    with pytest.raises(NotASessionFile):
        parse_file("amp", write_file(tmp_path / "settings.json", json.dumps({"amp.url": "x"})))


# -------------------------------------------------------------------------------------------------
# Goose
# -------------------------------------------------------------------------------------------------

def am_goose_db(path, messages_extra=True):
    con = sqlite3.connect(str(path))
    con.executescript("""
        CREATE TABLE sessions(id TEXT PRIMARY KEY, name TEXT, description TEXT, user_set_name BOOLEAN,
            session_type TEXT, working_dir TEXT, created_at TIMESTAMP, updated_at TIMESTAMP,
            parent_session_id TEXT);
        CREATE TABLE messages(id INTEGER PRIMARY KEY, message_id TEXT, session_id TEXT, role TEXT,
            content_json TEXT, created_timestamp INTEGER, metadata_json TEXT);
    """)
    con.execute("INSERT INTO sessions VALUES('20260101_1', 'Debug flaky test', 'generated title', 1, 'user', '/home/u/svc', "
                "'2026-01-01 10:00:00', '2026-01-01 10:05:00', NULL)")
    con.execute("INSERT INTO sessions VALUES('20260101_2', '20260101_2', 'Sub task', 0, 'sub-agent', '/home/u/svc', "
                "'2026-01-01 10:01:00', '2026-01-01 10:02:00', '20260101_1')")
    rows = [
        ("20260101_1", "user", [{"type": "text", "text": "why is test_upload flaky"}], 1767261600, {"userVisible": True, "agentVisible": True}),
        ("20260101_1", "assistant", [{"type": "thinking", "thinking": "timing issue"},
                                     {"type": "text", "text": "Running it."},
                                     {"type": "toolRequest", "id": "r1", "toolCall": {"status": "success", "value": {
                                         "name": "developer__shell", "arguments": {"command": "pytest -k upload"}}}}], 1767261601, None),
        ("20260101_1", "user", [{"type": "toolResponse", "id": "r1", "toolResult": {"status": "success", "value": [
            {"type": "text", "text": "1 failed: TimeoutError"}]}}], 1767261602, None),
        ("20260101_1", "user", [{"type": "text", "text": "Summary: upload test times out"}], 1767261700,
         {"userVisible": False, "agentVisible": True}),
        ("20260101_2", "assistant", [{"type": "text", "text": "sub agent work"}], 1767261660, None),
    ]
    for i, (sid, role, content, ts, meta) in enumerate(rows):
        con.execute("INSERT INTO messages(message_id, session_id, role, content_json, created_timestamp, metadata_json) "
                    "VALUES(?,?,?,?,?,?)", ("m%d" % i, sid, role, json.dumps(content), ts, json.dumps(meta) if meta else None))
    con.commit()
    con.close()
    return path


def test_goose_sqlite_sessions_tools_summary_and_utc_times(tmp_path):
    sessions = parse_file("goose", am_goose_db(tmp_path / "sessions.db"))
    main, sub = sessions
    assert (main.session_id, main.name, main.cwd) == ("20260101_1", "Debug flaky test", "/home/u/svc")
    assert main.created == "2026-01-01T10:00:00.000Z"          # CURRENT_TIMESTAMP text is UTC
    assert main.modified == "2026-01-01T10:05:00.000Z"
    assert kinds(main) == ["user", "thinking", "assistant", "tool", "summary"]
    assert "TimeoutError" in main.chunks[3].text and main.chunks[3].tool == "developer__shell"
    assert sub.parent == "20260101_1" and sub.name == "Sub task"


def test_goose_unknown_schema_and_legacy_jsonl(tmp_path):
    other = tmp_path / "other.db"
    con = sqlite3.connect(str(other))
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    with pytest.raises(NotASessionFile):
        parse_file("goose", other)
    legacy = write_jsonl(tmp_path / "legacy" / "myproj.jsonl", [
        {"working_dir": "/home/u/old", "description": "Old session", "message_count": 1},
        {"role": "user", "created": 1700000000, "content": [{"type": "text", "text": "legacy goose prompt"}]}])
    s = parse_file("goose", legacy)[0]
    assert (s.session_id, s.cwd, s.name, texts(s, "user")) == ("myproj", "/home/u/old", "Old session", ["legacy goose prompt"])
    assert s.created == "2023-11-14T22:13:20.000Z"
    am_goose_db(tmp_path / "legacy" / "sessions.db")   # once imported, the old files are not indexed twice
    assert PARSERS["goose"].list_files(str(tmp_path / "legacy")) == [str(tmp_path / "legacy" / "sessions.db")]
    assert PARSERS["goose"].default_roots({"HOME": "/h", "GOOSE_PATH_ROOT": "/g"}) == [os.path.join("/g", "data", "sessions")]


# -------------------------------------------------------------------------------------------------
# Crush
# -------------------------------------------------------------------------------------------------

def am_crush_db(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path))
    con.executescript("""
        CREATE TABLE sessions(id TEXT PRIMARY KEY, parent_session_id TEXT, title TEXT NOT NULL,
            message_count INTEGER, updated_at INTEGER, created_at INTEGER, summary_message_id TEXT);
        CREATE TABLE messages(id TEXT PRIMARY KEY, session_id TEXT, role TEXT, parts TEXT, model TEXT,
            created_at INTEGER, updated_at INTEGER, finished_at INTEGER, provider TEXT, is_summary_message INTEGER DEFAULT 0);
    """)
    con.execute("INSERT INTO sessions VALUES('s1', NULL, 'Swift parser cleanup', 4, 1754068138, 1754062312, 'm9')")
    con.execute("INSERT INTO sessions VALUES('title-s1', 's1', 'Generate a title', 1, 1754062312, 1754062312, NULL)")
    con.execute("INSERT INTO sessions VALUES('call_7', 's1', 'Find tests', 1, 1754062400, 1754062390, NULL)")
    msgs = [
        ("m1", "s1", "user", [{"type": "text", "data": {"text": "tidy the KDL lexer"}}], 1754062312, 0),
        ("m2", "s1", "assistant", [{"type": "reasoning", "data": {"thinking": "start with tokens"}},
                                   {"type": "text", "data": {"text": "Viewing the lexer."}},
                                   {"type": "tool_call", "data": {"id": "c1", "name": "view", "input": "{\"file_path\": \"KDLLexer.swift\"}", "finished": True}},
                                   {"type": "finish", "data": {"reason": "tool_use", "time": 1754062325}}], 1754062312, 0),
        ("m3", "s1", "tool", [{"type": "tool_result", "data": {"tool_call_id": "c1", "name": "", "content": "struct KDLLexer {}"}}], 1754062325, 0),
        ("t1", "title-s1", "user", [{"type": "text", "data": {"text": "tidy the KDL lexer"}}], 1754062312, 0),
        ("m4", "call_7", "assistant", [{"type": "text", "data": {"text": "found 6 test files"}}], 1754062399, 0),
        ("m9", "s1", "assistant", [{"type": "text", "data": {"text": "Summary so far: lexer tidied"}}], 1754068138, 1),
    ]
    for mid, sid, role, parts, ts, summ in msgs:
        con.execute("INSERT INTO messages VALUES(?,?,?,?,?,?,?,?,?,?)",
                    (mid, sid, role, json.dumps(parts), "m", ts, ts, None, "p", summ))
    con.commit()
    con.close()
    return path


def test_crush_reads_the_workspace_cwd_that_newer_releases_record(tmp_path):
    # Crush's migration 20260324000000_add_workspace_cwd_to_sessions: the folder the session ran in.
    db = am_crush_db(tmp_path / "kdl" / ".crush" / "crush.db")
    con = sqlite3.connect(str(db))
    con.execute("ALTER TABLE sessions ADD COLUMN workspace_cwd TEXT")
    con.execute("UPDATE sessions SET workspace_cwd = '/home/u/kdl/Sources' WHERE id = 's1'")
    con.commit()
    con.close()
    main, sub = parse_file("crush", db)
    assert main.cwd == "/home/u/kdl/Sources" and sub.cwd == str(tmp_path / "kdl")


def test_crush_sessions_subagents_title_sessions_and_tools(tmp_path):
    sessions = parse_file("crush", am_crush_db(tmp_path / "kdl" / ".crush" / "crush.db"))
    assert [s.session_id for s in sessions] == ["s1", "call_7"]     # "title-" sessions are skipped
    main, sub = sessions
    assert main.name == "Swift parser cleanup" and main.cwd == str(tmp_path / "kdl")
    assert main.created == "2025-08-01T15:31:52.000Z" and main.modified == "2025-08-01T17:08:58.000Z"  # seconds
    assert kinds(main) == ["user", "thinking", "assistant", "tool", "summary"]
    assert main.chunks[3].path == "KDLLexer.swift" and "struct KDLLexer" in main.chunks[3].text
    assert sub.parent == "s1" and texts(sub, "assistant") == ["found 6 test files"]
    assert sum(t == "tidy the KDL lexer" for s in sessions for t in texts(s, "user")) == 1


def test_crush_part_types_it_does_not_know_are_counted_and_the_wal_is_watched(tmp_path):
    db = am_crush_db(tmp_path / "kdl" / ".crush" / "crush.db")
    con = sqlite3.connect(str(db))
    con.execute("INSERT INTO messages VALUES('m5','s1','assistant',?, 'm', 1754062330, 1754062330, NULL, 'p', 0)",
                (json.dumps([{"type": "hologram", "data": {"text": "?"}}, {"type": "finish", "data": {}}]),))
    con.commit()
    con.close()
    report = ParseReport()
    PARSERS["crush"].parse(str(db), report)
    assert report.unknown == {"block hologram": 1}   # `finish` is skipped on purpose
    assert PARSERS["crush"].sidecars(str(db)) == [str(db) + "-wal"]


def test_crush_list_files_enters_dot_crush_only(tmp_path):
    am_crush_db(tmp_path / "p1" / ".crush" / "crush.db")
    am_crush_db(tmp_path / "p1" / "node_modules" / "x" / ".crush" / "crush.db")
    am_crush_db(tmp_path / ".other" / ".crush" / "crush.db")
    assert PARSERS["crush"].list_files(str(tmp_path)) == [str(tmp_path / "p1" / ".crush" / "crush.db")]
    assert PARSERS["crush"].default_roots({"HOME": str(tmp_path)}) == []


def test_crush_unknown_schema(tmp_path):
    path = tmp_path / "crush.db"
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE sessions(x)")
    con.commit()
    con.close()
    with pytest.raises(NotASessionFile):
        parse_file("crush", path)


def test_crush_samples():
    sessions = sample_sessions("crush")
    assert any("CRUSH.md" in t for s in sessions for t in texts(s, "user"))
    assert any(c.tool == "view" for s in sessions for c in s.chunks)


# -------------------------------------------------------------------------------------------------
# droid
# -------------------------------------------------------------------------------------------------


def test_droid_store_title_cwd_reminder_and_tool_join(tmp_path):
    p = write_jsonl(tmp_path / "s.jsonl", [
        {"type": "session_start", "id": "d1", "title": "first prompt", "sessionTitle": "Fix build", "cwd": "/w"},
        {"type": "message", "id": "m1", "timestamp": "2025-12-26T00:00:00Z", "message": {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nBe concise.\n</system-reminder>\n\nfix the build"}]}},
        {"type": "message", "id": "m2", "timestamp": "2025-12-26T00:00:01Z", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "tool_use", "id": "t1", "name": "Execute", "input": {"command": "make"}}]}},
        {"type": "message", "id": "m3", "timestamp": "2025-12-26T00:00:02Z", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "make: ok"}]}},
    ])
    [s] = parse_file("droid", p)
    assert (s.session_id, s.name, s.cwd) == ("d1", "Fix build", "/w")
    assert texts(s, "user") == ["fix the build"]
    assert "Be concise" in texts(s, "context")[0]
    assert kinds(s) == ["context", "user", "thinking", "tool"]
    assert "command: make" in s.chunks[-1].text and "make: ok" in s.chunks[-1].text
    assert (s.created, s.modified) == ("2025-12-26T00:00:00.000Z", "2025-12-26T00:00:02.000Z")


def test_droid_stream_json_final_text_not_doubled(tmp_path):
    p = write_jsonl(tmp_path / "x.jsonl", [
        {"type": "system", "session_id": "sx", "timestamp": 1767812640310, "cwd": "/d"},
        {"type": "message", "session_id": "sx", "timestamp": 1767812641000, "role": "user", "text": "List files"},
        {"type": "tool_call", "session_id": "sx", "timestamp": 1767812642000, "id": "c1", "toolName": "Execute",
         "parameters": {"command": "ls"}},
        {"type": "tool_result", "session_id": "sx", "timestamp": 1767812643000, "id": "c1",
         "value": {"stdout": "", "stderr": "boom", "exitCode": 2}},
        {"type": "message", "session_id": "sx", "timestamp": 1767812643500, "role": "assistant", "text": "Done"},
        {"type": "completion", "session_id": "sx", "timestamp": 1767812644000, "finalText": "Done"},
    ])
    [s] = parse_file("droid", p)
    assert (s.session_id, s.cwd) == ("sx", "/d")
    assert texts(s, "assistant") == ["Done"]
    assert "error:\n" in s.chunks[1].text and "boom" in s.chunks[1].text
    assert s.created == "2026-01-07T19:04:00.310Z"


def test_droid_streamed_fragments_of_one_message_are_one_chunk_in_order(tmp_path):
    # (Chunk.extend: thousands of fragments are joined in place, not copied at each one)
    fragments = ["part %05d; " % i for i in range(5000)]
    p = write_jsonl(tmp_path / "x.jsonl", [
        {"type": "system", "session_id": "sx", "timestamp": 1767812640310, "cwd": "/d"},
        {"type": "message", "session_id": "sx", "timestamp": 1767812641000, "role": "user", "text": "Stream it"},
        {"type": "message", "session_id": "sx", "timestamp": 1767812641500, "role": "assistant", "id": "a1", "text": "Start: "}] + [
        {"type": "message", "session_id": "sx", "timestamp": 1767812641600, "role": "assistant", "id": "a1", "subtype": "delta",
         "text": f} for f in fragments])
    [s] = parse_file("droid", p)
    assert texts(s, "assistant") == ["Start:" + "".join(fragments)]   # (a message's own text is stripped)


def test_a_streamed_message_longer_than_a_chunk_is_stored_capped_like_any_other(env, tmp_path, capsys):
    # Session.add caps a message at CHUNK_CAP; fragments joined after it (Chunk.extend) are capped
    # when the session is made ready: head and tail kept, the middle said to be dropped.
    root = tmp_path / "factory" / "sessions"
    write_config({"sources": [{"parser": "droid", "path": str(root)}]}, tmp_path)
    fragments = [" okapi%05d" % i for i in range(20000)]   # 220,000 characters in one message
    write_jsonl(root / "-w" / "sx.jsonl", [
        {"type": "system", "session_id": "sx", "timestamp": 1767812640310, "cwd": "/w"},
        {"type": "message", "session_id": "sx", "timestamp": 1767812641000, "role": "user", "text": "Stream it"},
        {"type": "message", "session_id": "sx", "timestamp": 1767812641500, "role": "assistant", "id": "a1",
         "text": "Start: headword"}] + [
        {"type": "message", "session_id": "sx", "timestamp": 1767812641600, "role": "assistant", "id": "a1",
         "subtype": "delta", "text": f} for f in fragments] + [
        {"type": "message", "session_id": "sx", "timestamp": 1767812641700, "role": "assistant", "id": "a1",
         "subtype": "delta", "text": " tailword"}])
    run(capsys, "index")
    chunks = json.loads(run(capsys, "show", "sx", "--json", "--max-chars", "0")[1])["chunks"]
    [text] = [c["text"] for c in chunks if c["kind"] == "assistant"]
    assert len(text) <= sesame.CHUNK_CAP + 100 and "characters dropped" in text
    assert text.startswith("Start: headword okapi00000") and text.endswith("okapi19999 tailword")
    assert search_ids(capsys, "headword") == ["sx"] and search_ids(capsys, "tailword") == ["sx"]
    assert "okapi10000" not in text   # (from the dropped middle)


def test_droid_session_opened_and_left_is_listed_not_indexed_until_something_is_said(env, tmp_path, capsys):
    root = tmp_path / "factory" / "sessions"
    write_config({"sources": [{"parser": "droid", "path": str(root)}]}, tmp_path)
    empty = write_jsonl(root / "-w" / "e1.jsonl", [
        {"type": "session_start", "id": "e1", "title": "New Session", "sessionTitle": "New Session", "cwd": "/w"}])
    write_jsonl(root / "-w" / "d1.jsonl", [
        {"type": "session_start", "id": "d1", "title": "New Session", "sessionTitle": "Fix session cookies", "cwd": "/w"},
        {"type": "message", "id": "m1", "timestamp": "2025-12-26T00:00:00Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "the session cookie expires early"}]}}])
    summary = json.loads(run(capsys, "index", "--json")[1])
    assert [p["path"] for p in summary["skipped"]] == [empty] and "nothing said" in summary["skipped"][0]["reason"]
    assert search_ids(capsys, "session") == ["d1"]
    status = json.loads(run(capsys, "status", "--json")[1])
    assert [f["path"] for f in status["notIndexed"]] == [empty]
    with open(empty, "a") as f:   # the user comes back and types
        f.write(json.dumps({"type": "message", "id": "m1", "timestamp": "2025-12-27T00:00:00Z", "message": {
            "role": "user", "content": [{"type": "text", "text": "rotate the session keys"}]}}) + "\n")
    assert search_ids(capsys, "rotate") == ["e1"]


def test_droid_rejects_other_jsonl(tmp_path):
    p = write_jsonl(tmp_path / "o.jsonl", [{"foo": 1}])
    with pytest.raises(NotASessionFile):
        parse_file("droid", p)


# -------------------------------------------------------------------------------------------------
# qwen
# -------------------------------------------------------------------------------------------------

ot_SID = "019f0000-0000-7000-8000-0000000000aa"


def ot_q(uuid, parent, type_, **kw):
    d = {"uuid": uuid, "parentUuid": parent, "sessionId": ot_SID, "timestamp": "2026-08-17T12:00:0%dZ" % int(uuid[-1]),
         "type": type_, "cwd": "/p", "version": "0.21.13"}
    d.update(kw)
    return d


def test_qwen_fragments_merged_hook_context_and_title(tmp_path):
    p = write_jsonl(tmp_path / "chats" / (ot_SID + ".jsonl"), [
        ot_q("u1", None, "user", systemPayload={"displayText": "read the readme", "hookContext": "h"},
          message={"role": "user", "parts": [{"text": "read the readme"},
                                             {"text": "<qwen:user-prompt-submit-context>\nh\n</qwen:user-prompt-submit-context>"}]}),
        ot_q("a2", "u1", "assistant", message={"role": "model", "parts": [{"text": "plan", "thought": True}]}),
        ot_q("a2", "u1", "assistant", message={"role": "model", "parts": [
            {"functionCall": {"id": "c1", "name": "read_file", "args": {"path": "/p/README.md"}}}, {"text": "Reading."}]}),
        ot_q("a2", "u1", "assistant", message={"role": "model", "parts": [{"text": "plan", "thought": True}]}),  # repeat
        ot_q("r3", "a2", "tool_result", message={"role": "user", "parts": [
            {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "# Hello"}}}]}),
        ot_q("s4", "r3", "system", subtype="custom_title", systemPayload={"customTitle": "Readme tour"}),
        ot_q("n5", "s4", "user", subtype="notification", systemPayload={"displayText": "task done"},
          message={"role": "user", "parts": [{"text": "task done"}]}),
    ])
    [s] = parse_file("qwen", p)
    assert (s.session_id, s.name, s.cwd) == (ot_SID, "Readme tour", "/p")
    assert texts(s, "user") == ["read the readme"]
    assert texts(s, "thinking") == ["plan"]          # the repeated fragment is indexed once
    assert texts(s, "assistant") == ["Reading."]
    tool = [c for c in s.chunks if c.kind == "tool"][0]
    assert "# Hello" in tool.text and tool.path == "/p/README.md"
    assert "task done" in texts(s, "context") and any("user-prompt-submit" in t for t in texts(s, "context"))


def test_qwen_failed_shell_command_is_an_error(tmp_path):
    # Qwen Code 0.15.10: a failed command's result has status "success"; its output names the exit code.
    out = "Command: %s\nDirectory: (root)\nOutput: %s\nError: (none)\nExit Code: %d\nSignal: 0\nProcess Group PGID: 17649"
    lines = []
    for i, (cmd, printed, code) in enumerate([("echo canary-1 && ls", "canary-1", 0), ("echo fail-x; exit 3", "fail-x", 3)]):
        lines += [
            ot_q("a%d" % (2 * i + 1), None, "assistant", message={"role": "model", "parts": [
                {"functionCall": {"id": "call_%d" % i, "name": "run_shell_command", "args": {"command": cmd}}}]}),
            ot_q("r%d" % (2 * i + 2), None, "tool_result", message={"role": "user", "parts": [
                {"functionResponse": {"id": "call_%d" % i, "name": "run_shell_command",
                                      "response": {"output": out % (cmd, printed, code)}}}]},
                 toolCallResult={"callId": "call_%d" % i, "status": "success", "resultDisplay": printed})]
    ok, failed = texts(parse_file("qwen", write_jsonl(tmp_path / "chats" / (ot_SID + ".jsonl"), lines))[0], "tool")
    assert ok.endswith("\noutput:\ncanary-1") and failed.endswith("\nerror:\nExit code 3\nfail-x")   # (the fields left out)
    # (fields as releases wrote them; what is not a field stays, and a text that is not a result is as it is)
    assert [sesame.shell_fields(o) for o in (
        "Directory: C:\\w\nOutput: a\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 7",
        "Command: cat <<EOF\nhi\nEOF\nDirectory: (root)\nOutput: hi\nError: Command exited 2\nExit Code: 2",
        "Output: (empty)\nProcess Group PGID: (none)", "Command: x\nno fields", "Output of the build: ok\nProcess Group PGID: 7")] == [
        "a", "Exit code 2\nhi\nError: Command exited 2", "", "Command: x\nno fields", "Output of the build: ok\nProcess Group PGID: 7"]


def test_qwen_tool_search_keeps_the_names_of_the_tools_it_loaded_not_their_definitions(tmp_path):
    # Qwen Code 0.15.10 offers MCP tools behind tool_search, which answers with their schemas (recorded
    # with the real CLI and Sesame's MCP server): the same descriptions in every session that loaded them.
    schema = ('<functions>\n<function>{"name":"mcp__sesame__search","description":"Find past coding-agent sessions '
              '(pi, Claude Code, Codex, ...)","parameters":{"type":"object"}}</function>\n<function>{"name":'
              '"exit_plan_mode","description":"Present the plan"}</function>\n</functions>')
    p = write_jsonl(tmp_path / "chats" / (ot_SID + ".jsonl"), [
        ot_q("a1", None, "assistant", message={"role": "model", "parts": [
            {"functionCall": {"id": "c1", "name": "tool_search", "args": {"query": "sesame search"}}}]}),
        ot_q("r2", "a1", "tool_result", message={"role": "user", "parts": [
            {"functionResponse": {"id": "c1", "name": "tool_search", "response": {"output": schema}}}]}),
        ot_q("a3", "r2", "assistant", message={"role": "model", "parts": [
            {"functionCall": {"id": "c2", "name": "read_file", "args": {"path": "/p/notes.md"}}}]}),
        ot_q("r4", "a3", "tool_result", message={"role": "user", "parts": [
            {"functionResponse": {"id": "c2", "name": "read_file", "response": {"output": "<functions> are listed here"}}}]}),
    ])
    loaded, read = texts(parse_file("qwen", p)[0], "tool")
    assert loaded == ("tool: tool_search\nquery: sesame search\noutput:\n"
                      "(tool definitions: mcp__sesame__search, exit_plan_mode)")
    assert read.endswith("output:\n<functions> are listed here")   # (only a whole listing is one)


def test_qwen_glued_objects_and_wrong_session(tmp_path):
    a = json.dumps(ot_q("u1", None, "user", message={"role": "user", "parts": [{"text": "one"}]}))
    b = json.dumps(ot_q("a2", "u1", "assistant", message={"role": "model", "parts": [{"text": "two"}]}))
    p = write_jsonl(tmp_path / (ot_SID + ".jsonl"), [a + b])
    [s] = parse_file("qwen", p)
    assert texts(s, "user") == ["one"] and texts(s, "assistant") == ["two"]
    # an unparsable tail after them, ending in a character whose last UTF-8 byte is a byte order
    # mark's (» is C2 BB): the objects before it are still read
    p = write_jsonl(tmp_path / (ot_SID + ".jsonl"), [a + b + '{"type": "cut off »'])
    [s] = parse_file("qwen", p)
    assert texts(s, "user") == ["one"] and texts(s, "assistant") == ["two"]
    other = write_jsonl(tmp_path / "019f0000-0000-7000-8000-0000000000bb.jsonl", [a])
    with pytest.raises(NotASessionFile):
        parse_file("qwen", other)


def test_qwen_branch_copies_dropped_and_sidechain_is_subagent(tmp_path):
    p = write_jsonl(tmp_path / (ot_SID + ".jsonl"), [
        ot_q("u1", None, "user", forkedFrom={"sessionId": "parent-1", "messageUuid": "u1"},
          message={"role": "user", "parts": [{"text": "old prompt"}]}),
        ot_q("u2", "u1", "user", message={"role": "user", "parts": [{"text": "new prompt"}]}),
        ot_q("a3", "u2", "assistant", agentId="explore-1", isSidechain=True,
          message={"role": "model", "parts": [{"text": "sub work"}]}),
    ])
    main, sub = parse_file("qwen", p)
    assert main.parent == "parent-1" and texts(main, "user") == ["new prompt"]
    assert sub.parent == ot_SID and texts(sub, "assistant") == ["sub work"]


# -------------------------------------------------------------------------------------------------
# kimi
# -------------------------------------------------------------------------------------------------


def ot_kimi_wire(tmp_path, agent, rows, state=None):
    sdir = tmp_path / "wd_p_abc" / "session_1"
    if state is not None:
        sdir.mkdir(parents=True, exist_ok=True)
        (sdir / "state.json").write_text(json.dumps(state))
    return write_jsonl(sdir / "agents" / agent / "wire.jsonl",
                       [{"type": "metadata", "protocol_version": "1.4", "created_at": 1785612800000}] + rows)


def test_kimi_main_title_cwd_injection_and_tools(tmp_path):
    p = ot_kimi_wire(tmp_path, "main", [
        {"type": "turn.prompt", "input": [{"type": "text", "text": "run ls"}], "time": 1785612812000},
        {"type": "context.append_message", "message": {"role": "user", "content": [{"type": "text", "text": "run ls"}],
                                                       "origin": {"kind": "user"}}, "time": 1785612812001},
        {"type": "context.append_message", "message": {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>plan mode</system-reminder>"}],
            "origin": {"kind": "injection", "variant": "plan_mode"}}, "time": 1785612812002},
        {"type": "context.append_loop_event", "event": {"type": "content.part", "stepUuid": "s1",
                                                        "part": {"type": "think", "think": "use Bash"}}, "time": 1785612813000},
        {"type": "context.append_loop_event", "event": {"type": "tool.call", "toolCallId": "Bash_0", "name": "Bash",
                                                        "args": {"command": "ls"}}, "time": 1785612814000},
        {"type": "context.append_loop_event", "event": {"type": "tool.result", "toolCallId": "Bash_0",
                                                        "result": {"output": "README.md\n"}}, "time": 1785612815000},
        {"type": "context.append_loop_event", "event": {"type": "content.part", "stepUuid": "s2",
                                                        "part": {"type": "text", "text": "Here"}}, "time": 1785612816000},
        {"type": "context.append_loop_event", "event": {"type": "content.part", "stepUuid": "s2",
                                                        "part": {"type": "text", "text": " it is."}}, "time": 1785612816001},
        {"type": "context.apply_compaction", "summary": "We listed files.", "time": 1785612817000},
    ], state={"title": "run ls", "isCustomTitle": False, "workDir": "/proj", "createdAt": "2026-08-01T19:33:20.000Z",
              "agents": {"main": {"type": "main", "parentAgentId": None}}})
    [s] = parse_file("kimi", p)
    assert (s.session_id, s.name, s.cwd, s.parent) == ("session_1", "run ls", "/proj", None)
    assert texts(s, "user") == ["run ls"]               # turn.prompt is not indexed twice
    assert texts(s, "context") == ["<system-reminder>plan mode</system-reminder>"]
    assert texts(s, "assistant") == ["Here it is."]
    assert "README.md" in texts(s, "tool")[0] and texts(s, "summary") == ["We listed files."]
    assert s.created == "2026-08-01T19:33:20.000Z"


def test_kimi_code_steering_input_once_and_unknown_ops_counted(tmp_path):
    p = ot_kimi_wire(tmp_path, "main", [
        {"type": "turn.steer", "input": [{"type": "text", "text": "use rg instead"}], "origin": {"kind": "user"},
         "time": 1785612812000},
        {"type": "context.append_message", "message": {"role": "user", "content": [{"type": "text", "text": "use rg instead"}],
                                                       "origin": {"kind": "user"}}, "time": 1785612812001},
        {"type": "turn.steer", "input": [{"type": "text", "text": "stop"}], "time": 1785612813000},
        {"type": "turn.cancel", "time": 1785612814000}, {"type": "usage.record", "time": 1785612814001},
        {"type": "hologram.beam", "time": 1785612815000}])
    report = ParseReport()
    [s] = PARSERS["kimi"].parse(p, report)
    assert texts(s, "user") == ["use rg instead", "stop"]   # a cancelled steer is still what the user typed
    assert report.unknown == {"hologram.beam": 1}


def test_kimi_subagent_points_to_parent(tmp_path):
    p = ot_kimi_wire(tmp_path, "agent-0", [
        {"type": "context.append_message", "message": {"role": "user", "content": [{"type": "text", "text": "count files"}],
                                                       "origin": {"kind": "system_trigger", "name": "subagent"}},
         "time": 1785612812001}],
        state={"title": "x", "isCustomTitle": True, "customTitle": "Mine", "workDir": "/proj",
               "agents": {"main": {"parentAgentId": None}, "agent-0": {"type": "sub", "parentAgentId": "main"}}})
    [s] = parse_file("kimi", p)
    assert (s.session_id, s.parent, s.name) == ("session_1/agent-0", "session_1", None)
    assert kinds(s) == ["context"]
    main = ot_kimi_wire(tmp_path, "main", [])
    assert parse_file("kimi", main)[0].name == "Mine"


def test_kimi_state_json_is_not_a_session(tmp_path):
    (tmp_path / "state.json").write_text('{"title": "x"}')
    with pytest.raises(NotASessionFile):
        parse_file("kimi", tmp_path / "state.json")


def ot_kimi_cli_session(tmp_path, events, state=None, cwd="/home/u/proj", sid="e262be1f-673c-4628-9d78-97b1c81d88be"):
    """A kimi-cli 1.x session as 1.52.0 writes it: ~/.kimi/sessions/<md5(cwd)>/<id>/wire.jsonl, and the
    work dir in ~/.kimi/kimi.json."""
    share = tmp_path / ".kimi"
    share.mkdir(parents=True, exist_ok=True)
    (share / "kimi.json").write_text(json.dumps({"work_dirs": [{"path": cwd, "kaos": "local", "last_session_id": sid}]}))
    folder = share / "sessions" / hashlib.md5(cwd.encode()).hexdigest() / sid
    if state is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "state.json").write_text(json.dumps(state))
    return write_jsonl(folder / "wire.jsonl", [{"type": "metadata", "protocol_version": "1.10"}] + [
        {"timestamp": 1795484101.5 + i, "message": {"type": t, "payload": p}} for i, (t, p) in enumerate(events)])


ot_KIMI_CLI_EVENTS = [
    ("TurnBegin", {"user_input": "Now a failing one: run `echo failing-kimi; exit 3`"}),
    ("StepBegin", {"n": 1}),
    ("ToolCall", {"type": "function", "id": "call_03", "function": {
        "name": "Shell", "arguments": "{\"command\": \"echo failing-kimi; exit 3\"}"}, "extras": None}),
    ("ToolResult", {"tool_call_id": "call_03", "return_value": {
        "is_error": True, "output": "failing-kimi\n", "message": "Command failed with exit code: 3.",
        "display": [{"type": "brief", "text": "Failed with exit code: 3"}], "extras": None}}),
    ("StatusUpdate", {"context_tokens": 50}),
    ("StepBegin", {"n": 2}),
    ("ContentPart", {"type": "think", "think": "It exited with 3."}),
    ("ContentPart", {"type": "text", "text": "The command failed"}),
    ("ContentPart", {"type": "text", "text": " with code 3."}),
    ("SubagentEvent", {"agent_id": "a1", "event": {"type": "ContentPart", "payload": {"type": "text", "text": "copy"}}}),
    ("TurnEnd", {}),
]


def test_kimi_cli_wire_prompts_tools_failures_cwd_and_resume(tmp_path):
    p = ot_kimi_cli_session(tmp_path, ot_KIMI_CLI_EVENTS, state={
        "version": 1, "custom_title": "Now a failing one: run `echo failing-kimi; exit 3`", "title_generated": False})
    assert PARSERS["kimi"].list_files(str(tmp_path / ".kimi" / "sessions")) == [str(p)]
    report = ParseReport()
    [s] = PARSERS["kimi"].parse(str(p), report)
    assert (s.session_id, s.cwd, s.parent) == ("e262be1f-673c-4628-9d78-97b1c81d88be", "/home/u/proj", None)
    assert s.name is None   # the automatic title is the shortened first prompt
    assert kinds(s) == ["user", "tool", "thinking", "assistant"]   # the sub-agent's copy is not indexed
    tool = s.chunks[1]
    assert tool.tool == "Shell" and "error:" in tool.text and "exit code: 3" in tool.text and "failing-kimi" in tool.text
    assert texts(s, "assistant") == ["The command failed with code 3."]
    assert s.created == "2026-11-24T01:35:01.500Z" and s.modified == "2026-11-24T01:35:11.500Z"
    assert not report.unknown
    assert PARSERS["kimi"].resume_command({"session_id": s.session_id, "cwd": s.cwd, "path": str(p)}) == \
        "cd /home/u/proj && kimi -r e262be1f-673c-4628-9d78-97b1c81d88be"


def test_kimi_cli_sub_agents_written_only_in_the_parents_wire_are_child_sessions(env, tmp_path, capsys):
    # Protocol 1.3 keeps no subagents/ folder: a Task sub-agent's events are SubagentEvent lines of
    # the parent's wire (tagged with the Task call's id), and context_sub_N.jsonl beside it. A call's
    # arguments stream: the ToolCall holds their start, ToolCallPart lines the rest.
    arguments = json.dumps({"description": "Explore the referral code", "subagent_name": "coder", "prompt": "read it"})
    task = {"type": "function", "id": "tool_T1", "function": {"name": "Task", "arguments": arguments[:25]}}

    def sub(etype, payload):
        return ("SubagentEvent", {"task_tool_call_id": "tool_T1", "event": {"type": etype, "payload": payload}})
    events = [("TurnBegin", {"user_input": "implement the referral endpoints"}), ("ToolCall", task),
              ("ToolCallPart", {"arguments_part": arguments[25:]}),
              sub("TurnBegin", {"user_input": "read it"}),
              sub("ContentPart", {"type": "text", "text": "A complete understanding of the quetzal structure."}),
              sub("ToolCall", {"type": "function", "id": "tool_R1", "function": {
                  "name": "ReadFile", "arguments": "{\"path\": \"app/referrals.py\"}"}}),
              sub("ToolResult", {"tool_call_id": "tool_R1", "return_value": {"is_error": False, "output": "def refer(): pass"}}),
              ("ToolResult", {"tool_call_id": "tool_T1", "return_value": {"is_error": False, "output": "explored"}}),
              ("ContentPart", {"type": "text", "text": "Done with the endpoints."})]
    p = ot_kimi_cli_session(tmp_path / "home", events[:3] + events[-2:])   # first the parent alone
    write_config({"sources": [{"parser": "kimi", "path": str(tmp_path / "home" / ".kimi" / "sessions")}]}, tmp_path)
    run(capsys, "index")
    with open(p, "a") as f:   # the sub-agent's lines appended: the file is read again from its start
        f.write("".join(json.dumps({"timestamp": 1795484200 + i, "message": {"type": t, "payload": q}}) + "\n"
                        for i, (t, q) in enumerate(events[3:7])))
    sid, child = "e262be1f-673c-4628-9d78-97b1c81d88be", "e262be1f-673c-4628-9d78-97b1c81d88be/tool_T1"
    assert search_ids(capsys, "quetzal structure") == [child]
    code, out, _ = run(capsys, "show", child, "--json", "--max-chars", "0")
    shown = json.loads(out)
    assert (shown["session"]["parent"], shown["session"]["name"]) == (sid, "Explore the referral code")
    assert [(c["kind"], c["tool"] or c["text"]) for c in shown["chunks"]] == [
        ("user", "read it"), ("assistant", "A complete understanding of the quetzal structure."), ("tool", "ReadFile")]
    code, out, _ = run(capsys, "show", sid, "--json", "--max-chars", "0")
    parent = json.loads(out)["chunks"]
    assert not any("quetzal" in c["text"] for c in parent)   # not in the parent twice
    assert [c["text"] for c in parent if c["tool"] == "Task"][0].count("Explore the referral code") == 1
    info = json.loads(run(capsys, "status", "--json")[1])
    assert info["sessions"] == 2 and not [a for a in info["perAgent"] if a.get("unrecognizedRecords")]


def test_kimi_cli_wire_starting_with_a_result_takes_its_call_from_the_context(tmp_path):
    # A wire that begins with the result of a call it does not hold (a real 1.3 session): the call is
    # in context.jsonl beside it.
    p = ot_kimi_cli_session(tmp_path, [
        ("ToolResult", {"tool_call_id": "tool_G1", "return_value": {"is_error": False, "output": "Switched to branch 'work'"}}),
        ("ToolResult", {"tool_call_id": "tool_G2", "return_value": {"is_error": False, "output": "orphan output"}}),
        ("TurnBegin", {"user_input": "now deploy"})])
    write_jsonl(os.path.join(os.path.dirname(p), "context.jsonl"), [
        {"role": "user", "content": "switch branches"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "tool_G1", "function": {
            "name": "Shell", "arguments": json.dumps({"command": "git checkout -f work"})}}]},
        {"role": "tool", "tool_call_id": "tool_G1", "content": "Switched to branch 'work'"}])
    [s] = PARSERS["kimi"].parse(str(p), ParseReport())
    first, second = [c for c in s.chunks if c.kind == "tool"]
    assert first.tool == "Shell" and first.text == "tool: Shell\ncommand: git checkout -f work\noutput:\nSwitched to branch 'work'"
    assert second.text == "tool: tool\noutput:\norphan output"   # a call found nowhere keeps its output
    assert texts(s, "user") == ["now deploy"]


def test_kimi_cli_title_set_by_the_user_is_the_name_and_unknown_events_are_counted(tmp_path):
    p = ot_kimi_cli_session(tmp_path, ot_KIMI_CLI_EVENTS[:1] + [("Hologram", {})],
                            state={"custom_title": "Exit codes", "title_generated": True})
    report = ParseReport()
    [s] = PARSERS["kimi"].parse(str(p), report)
    assert s.name == "Exit codes" and report.unknown == {"Hologram": 1}


def test_kimi_cli_subagent_wire_is_its_own_session(tmp_path):
    ot_kimi_cli_session(tmp_path, ot_KIMI_CLI_EVENTS[:1])
    [session] = (tmp_path / ".kimi" / "sessions").glob("*/*")
    sub = session / "subagents" / "a1" / "wire.jsonl"
    write_jsonl(sub, [{"type": "metadata", "protocol_version": "1.10"},
                         {"timestamp": 1795484200.0, "message": {"type": "TurnBegin", "payload": {"user_input": "count files"}}}])
    (sub.parent / "meta.json").write_text(json.dumps({"agent_id": "a1", "description": "Count the files"}))
    assert len(PARSERS["kimi"].list_files(str(tmp_path / ".kimi" / "sessions"))) == 2
    [s] = parse_file("kimi", sub)
    assert (s.session_id, s.parent, s.name, s.cwd) == ("e262be1f-673c-4628-9d78-97b1c81d88be/a1",
                                                       "e262be1f-673c-4628-9d78-97b1c81d88be", "Count the files", "/home/u/proj")


def test_kimi_cli_0x_context_file_is_a_session(tmp_path):
    # kimi-cli 0.x: ~/.kimi/sessions/<md5(cwd)>/<id>.jsonl holds the model's context, nothing else.
    (tmp_path / "kimi.json").write_text(json.dumps({"work_dirs": [{"path": "/w"}]}))
    group = tmp_path / "sessions" / hashlib.md5(b"/w").hexdigest()
    p = write_jsonl(group / "1279524b-c991-4a49-ae24-df1ac18c2d62.jsonl", [
        {"role": "_checkpoint", "id": 0},
        {"role": "user", "content": "list the files"},
        {"role": "user", "content": [{"type": "text", "text": "<system>CHECKPOINT 1</system>"}]},
        {"role": "_usage", "token_count": 50},
        {"role": "assistant", "content": [{"type": "think", "think": "use ls"}, {"type": "text", "text": "Listing."}],
         "tool_calls": [{"type": "function", "id": "c1", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
        {"role": "tool", "content": [{"type": "text", "text": "README.md"}], "tool_call_id": "c1"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "id": "c2", "function": {"name": "Bash", "arguments": "{\"command\": \"exit 3\"}"}}]},
        {"role": "tool", "content": [{"type": "text", "text": "<system>ERROR: Command failed with exit code: 3.</system>"}],
         "tool_call_id": "c2"}])
    write_jsonl(group / "1279524b-c991-4a49-ae24-df1ac18c2d62_1.jsonl", [{"role": "user", "content": "old"}])
    assert PARSERS["kimi"].list_files(str(tmp_path / "sessions")) == [str(p)]   # a rotated history is not listed
    [s] = parse_file("kimi", p)
    assert (s.session_id, s.cwd) == ("1279524b-c991-4a49-ae24-df1ac18c2d62", "/w")
    assert kinds(s) == ["user", "thinking", "assistant", "tool", "tool"] and "README.md" in texts(s, "tool")[0]
    assert "error:" in texts(s, "tool")[1]   # kimi-cli 0.50 says a command failed only in the text


def test_kimi_default_roots_cover_kimi_code_and_kimi_cli():
    assert PARSERS["kimi"].default_roots({"HOME": "/h"}) == ["/h/.kimi-code/sessions", "/h/.kimi/sessions"]
    assert PARSERS["kimi"].default_roots({"HOME": "/h", "KIMI_SHARE_DIR": "/k"})[1] == "/k/sessions"


# -------------------------------------------------------------------------------------------------
# openclaw
# -------------------------------------------------------------------------------------------------


def test_openclaw_injected_context_and_tools(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [
        {"type": "session", "id": "oc1", "version": 3, "timestamp": "2026-02-24T10:00:00Z", "cwd": "/r"},
        {"type": "custom_message", "customType": "openclaw.runtime-context", "content": "runtime ctx", "display": False,
         "id": "c", "timestamp": "2026-02-24T10:00:01Z"},
        {"type": "message", "id": "m0", "timestamp": "2026-02-24T10:00:01Z", "message": {"role": "user", "content": [
            {"type": "text", "text": "Read HEARTBEAT.md if it exists and consider outstanding tasks."}]}},
        {"type": "message", "id": "m1", "timestamp": "2026-02-24T10:00:02Z", "message": {"role": "user", "content": [
            {"type": "text", "text": "git status please"}]}},
        {"type": "message", "id": "m2", "timestamp": "2026-02-24T10:00:03Z", "message": {"role": "assistant", "content": [
            {"type": "toolCall", "id": "t1", "name": "run_terminal", "arguments": {"command": "git status"}}]}},
        {"type": "message", "id": "m3", "timestamp": "2026-02-24T10:00:04Z", "message": {
            "role": "toolResult", "toolCallId": "t1", "toolName": "run_terminal", "content": "clean", "isError": False}},
    ])
    [s] = parse_file("openclaw", p)
    assert (s.session_id, s.cwd) == ("oc1", "/r")
    assert texts(s, "user") == ["git status please"]
    assert len(texts(s, "context")) == 2
    assert "clean" in texts(s, "tool")[0]
    assert (s.created, s.modified) == ("2026-02-24T10:00:00.000Z", "2026-02-24T10:00:04.000Z")


def _oc_event(kind, ts, **fields):
    return dict({"type": kind, "id": "e%d" % ts, "timestamp": "2026-09-10T10:%02d:00.000Z" % ts}, **fields)


def _oc_msg(ts, role, content, **extra):
    return _oc_event("message", ts, message=dict({"role": role, "content": content}, **extra))


def openclaw_db(path, windows, events, wal=False):
    """An OpenClaw agent database as 2026.8.1+ writes it (openclaw-agent.sqlite): the tables and columns
    the reader uses, with schema 23's event_zstd beside event_json. `windows`: (session id, session key,
    display name, spawned by); `events`: (session id, entry dict | raw text | zstd bytes). Returns the
    connection when `wal` (kept open, as the gateway keeps it: the -wal file stays), else None."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    con = sqlite3.connect(str(path), isolation_level=None)
    if wal:
        con.execute("PRAGMA journal_mode=WAL")
    con.executescript(
        "CREATE TABLE session_nodes(session_key TEXT NOT NULL PRIMARY KEY, current_session_id TEXT NOT NULL,"
        " entry_json TEXT NOT NULL, updated_at INTEGER NOT NULL);"
        "CREATE TABLE session_windows(session_id TEXT NOT NULL PRIMARY KEY, session_key TEXT NOT NULL,"
        " previous_session_id TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
        " transcript_updated_at INTEGER, spawned_by TEXT, display_name TEXT);"
        "CREATE TABLE transcript_events(session_id TEXT NOT NULL, seq INTEGER NOT NULL, event_json TEXT,"
        " created_at INTEGER NOT NULL, event_zstd BLOB, event_utf8_bytes INTEGER, PRIMARY KEY (session_id, seq));")
    t0 = 1789034400000  # 2026-09-10T10:00:00Z
    for sid, key, title, spawned_by in windows:
        con.execute("INSERT OR REPLACE INTO session_nodes VALUES (?, ?, '{}', ?)", (key, sid, t0))
        con.execute("INSERT INTO session_windows (session_id, session_key, created_at, updated_at, spawned_by,"
                    " display_name) VALUES (?, ?, ?, ?, ?, ?)", (sid, key, t0, t0 + 60000, spawned_by, title))
    add_openclaw_events(con, events)
    if wal:
        return con
    con.close()
    return None


def add_openclaw_events(con, events):
    """Append transcript rows as the gateway does (seq = MAX(seq) + 1 per session)."""
    for sid, e in events:
        seq = con.execute("SELECT coalesce(max(seq) + 1, 0) FROM transcript_events WHERE session_id=?", (sid,)).fetchone()[0]
        if isinstance(e, bytes):
            con.execute("INSERT INTO transcript_events VALUES (?, ?, NULL, 0, ?, 1)", (sid, seq, e))
        else:
            con.execute("INSERT INTO transcript_events VALUES (?, ?, ?, 0, NULL, NULL)",
                        (sid, seq, e if isinstance(e, str) else json.dumps(e)))


OC_MAIN = [("s-main", {"type": "session", "version": 3, "id": "s-main", "timestamp": "2026-09-10T10:00:00.000Z",
                       "cwd": "/home/u/shop"}),
           ("s-main", _oc_msg(1, "user", [{"type": "text", "text": "the refund webhook retries twice"}])),
           ("s-main", _oc_msg(2, "assistant", [{"type": "toolCall", "id": "t1", "name": "exec",
                                                "arguments": {"command": "grep -rn retry webhooks/"}}])),
           ("s-main", _oc_msg(3, "toolResult", "webhooks/refund.py:12: retry(2)", toolCallId="t1", toolName="exec")),
           ("s-sub", {"type": "session", "version": 3, "id": "s-sub", "timestamp": "2026-09-10T10:05:00.000Z",
                      "cwd": "/home/u/shop"}),
           ("s-sub", _oc_msg(6, "user", [{"type": "text", "text": "check the idempotency keys"}])),
           ("s-sub", _oc_event("session_info", 7, name="Idempotency check"))]
OC_WINDOWS = [("s-main", "agent:main:main", "Refund retries", None),
              ("s-sub", "agent:main:subagent:1", None, "agent:main:main")]


def test_openclaw_database_sessions_are_read_as_the_jsonl_files_were(tmp_path, monkeypatch):
    """OpenClaw 2026.8.1 keeps transcripts in agents/<id>/agent/openclaw-agent.sqlite: each session
    window a session, its transcript_events the pi entries its JSONL file held; a zstd-compressed
    entry (schema 23) is read with what the machine has, or left out and counted, never the session."""
    import shutil
    exe = shutil.which("zstd")
    packed = subprocess.run([exe, "-c", "-q"], input=json.dumps(_oc_msg(4, "user", "compressed: the pelican ledger")).encode(),
                            stdout=subprocess.PIPE, check=True).stdout if exe else None
    db = tmp_path / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    openclaw_db(db, OC_WINDOWS, OC_MAIN + ([("s-main", packed)] if packed else []) + [("s-main", "{not json")])
    legacy = write_jsonl(tmp_path / "agents" / "main" / "sessions" / "old.jsonl", [dict(OC_MAIN[0][1], id="old")])
    assert PARSERS["openclaw"].list_files(str(tmp_path / "agents")) == [str(db), legacy]
    report = ParseReport()
    main, sub = PARSERS["openclaw"].parse(str(db), report)
    assert (main.session_id, main.name, main.cwd, main.parent) == ("s-main", "Refund retries", "/home/u/shop", None)
    assert texts(main, "user")[0] == "the refund webhook retries twice"
    assert "grep -rn retry webhooks/" in texts(main, "tool")[0] and "refund.py:12" in texts(main, "tool")[0]
    assert (sub.session_id, sub.name, sub.parent) == ("s-sub", "Idempotency check", "s-main")
    assert main.created == "2026-09-10T10:00:00.000Z" and sub.modified >= "2026-09-10T10:06:00.000Z"
    if packed:
        assert texts(main, "user")[1] == "compressed: the pelican ledger"
        assert sum(report.skipped.values()) == 1                       # the row that is not JSON
        monkeypatch.setattr(sesame, "_zstd_module", lambda: None)     # no decompressor on this machine
        monkeypatch.setattr(shutil, "which", lambda name: None)
        report = ParseReport()
        main, _ = PARSERS["openclaw"].parse(str(db), report)
        assert texts(main, "user") == ["the refund webhook retries twice"] and sum(report.skipped.values()) == 2
    other = tmp_path / "x" / "agent" / "openclaw-agent.sqlite"   # another program's database under that name
    openclaw_db(other, [], [])
    con = sqlite3.connect(str(other))
    con.execute("DROP TABLE transcript_events")
    con.close()
    assert PARSERS["openclaw"].session_marks(str(other)) is None
    with pytest.raises(NotASessionFile):
        PARSERS["openclaw"].parse(str(other), ParseReport())


def test_openclaw_database_written_by_a_running_gateway_is_searched_fresh_and_once(env, capsys, monkeypatch, tmp_path):
    """The gateway keeps its database open in WAL mode: a new entry may live in the -wal file alone,
    and the next search finds it from any folder. A session read from its JSONL file before
    `openclaw doctor` imported it is one result, not two."""
    agents = tmp_path / "home" / ".openclaw" / "agents"
    write_jsonl(agents / "main" / "sessions" / "s-main.jsonl", [e for sid, e in OC_MAIN if sid == "s-main"])
    gateway = openclaw_db(agents / "main" / "agent" / "openclaw-agent.sqlite", OC_WINDOWS, OC_MAIN, wal=True)
    try:
        write_config({"sources": [{"parser": "openclaw", "path": str(agents)}]}, tmp_path)
        age(tmp_path / "home")
        assert run(capsys, "index")[0] == 0
        assert search_ids(capsys, "refund webhook") == ["s-main"]
        assert search_ids(capsys, "idempotency keys") == ["s-sub"]
        monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
        monkeypatch.chdir(tmp_path)
        add_openclaw_events(gateway, [("s-main", _oc_msg(9, "user", [{"type": "text", "text": "now the walrus invoices"}]))])
        assert os.path.getsize(str(agents / "main" / "agent" / "openclaw-agent.sqlite-wal")) > 0
        assert search_ids(capsys, "walrus invoices") == ["s-main"]
    finally:
        gateway.close()


# -------------------------------------------------------------------------------------------------
# grok
# -------------------------------------------------------------------------------------------------


def grok_db(path, sessions, messages):
    """superagent-ai/grok-cli's ~/.grok/grok.db (src/storage/migrations.ts, user_version 3): sessions
    (id, title, cwd_at_start, cwd_last, created_at, updated_at) and messages (session_id, seq, role,
    message_json: an AI SDK message), the columns the reader uses."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    con = sqlite3.connect(str(path))
    con.executescript(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, title TEXT, model TEXT NOT NULL,"
        " mode TEXT NOT NULL, cwd_at_start TEXT NOT NULL, cwd_last TEXT NOT NULL, status TEXT NOT NULL,"
        " created_at TEXT NOT NULL, updated_at TEXT NOT NULL, recap_text TEXT);"
        "CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,"
        " message_json TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (session_id, seq));")
    for sid, title, cwd in sessions:
        con.execute("INSERT INTO sessions VALUES (?, 'w1', ?, 'grok-4', 'agent', ?, ?, 'active', ?, ?, NULL)",
                    (sid, title, cwd, cwd, "2026-04-02T10:00:00.000Z", "2026-04-02T10:09:00.000Z"))
    for n, (sid, message) in enumerate(messages):
        con.execute("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", (sid, n + 1, message["role"], json.dumps(message),
                                                                    "2026-04-02T10:%02d:00.000Z" % (n + 1)))
    con.commit()
    con.close()
    return str(path)


GROK_DB_MESSAGES = [
    ("a1b2c3d4e5f6", {"role": "user", "content": [{"type": "text", "text": "why does the upload retry forever"},
                                                  {"type": "image", "image": "data:image/png;base64,AAAA"}]}),
    ("a1b2c3d4e5f6", {"role": "assistant", "content": [
        {"type": "reasoning", "text": "check the backoff"},
        {"type": "text", "text": "Let me read the uploader."},
        {"type": "tool-call", "toolCallId": "call_1", "toolName": "read_file", "input": {"path": "src/upload.ts"}}]}),
    ("a1b2c3d4e5f6", {"role": "tool", "content": [
        {"type": "tool-result", "toolCallId": "call_1", "toolName": "read_file",
         "output": {"type": "json", "value": {"success": False, "output": "", "error": "ENOENT: src/upload.ts"}}}]}),
    ("a1b2c3d4e5f6", {"role": "system", "content": "Background task 3 finished."}),
    ("a1b2c3d4e5f6", {"role": "assistant", "content": "The retry loop has no cap."}),
]


def test_superagent_grok_cli_database_sessions_tools_and_resume(env, tmp_path, capsys):
    """superagent-ai/grok-cli (grok-dev 1.0 on) keeps sessions in ~/.grok/grok.db, not in files."""
    home = pathlib.Path(os.environ["HOME"])
    assert PARSERS["grok"].default_roots({"HOME": "/h"}) == ["/h/.grok/sessions", "/h/.grok/grok.db"]
    db = grok_db(home / ".grok" / "grok.db", [("a1b2c3d4e5f6", "Upload retries", "/home/u/app")], GROK_DB_MESSAGES)
    report = ParseReport()
    [s] = PARSERS["grok"].parse(db, report)
    assert (s.session_id, s.name, s.cwd) == ("a1b2c3d4e5f6", "Upload retries", "/home/u/app")
    assert kinds(s) == ["user", "thinking", "assistant", "tool", "context", "assistant"]
    assert texts(s, "user") == ["why does the upload retry forever"]
    assert "src/upload.ts" in texts(s, "tool")[0] and "ENOENT" in texts(s, "tool")[0] and "error" in texts(s, "tool")[0]
    assert (s.created, s.modified) == ("2026-04-02T10:00:00.000Z", "2026-04-02T10:09:00.000Z")
    assert not report.unknown and not report.skipped
    write_config({"sources": []}, tmp_path, text="{}")   # discovered, as a new user has it
    code, out, err = run(capsys, "search", "upload", "retry", "--json")
    [hit] = json.loads(out)["results"]
    assert hit["sessionId"] == "a1b2c3d4e5f6" and hit["resumeCommand"] == "cd /home/u/app && grok -s a1b2c3d4e5f6"


def test_grok_summary_title_synthetic_context_and_subagent_parent(tmp_path):
    bucket = tmp_path / "%2Ftmp%2Fp"
    (bucket / "parent1" / "subagents" / "child1").mkdir(parents=True)
    (bucket / "parent1" / "subagents" / "child1" / "meta.json").write_text(json.dumps({"parent_session_id": "parent1"}))
    (bucket / "child1").mkdir()
    (bucket / "child1" / "summary.json").write_text(json.dumps({
        "info": {"id": "child1", "cwd": "/tmp/p"}, "generated_title": "Count files", "session_summary": "x",
        "created_at": "2026-07-31T10:13:27.574131Z", "updated_at": "2026-07-31T10:15:02.118940Z"}))
    p = write_jsonl(bucket / "child1" / "chat_history.jsonl", [
        {"type": "system", "content": "You are Grok."},
        {"type": "user", "content": [{"type": "text", "text": "<user_info>OS</user_info>"}], "synthetic_reason": "environment_context"},
        {"type": "user", "content": [{"type": "text", "text": "count py files"}], "prompt_index": 0},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "use find"}], "encrypted_content": "zzz"},
        {"type": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "run_terminal_cmd",
                                                               "arguments": "{\"command\":\"find . | wc -l\"}"}]},
        {"type": "tool_result", "tool_call_id": "c1", "content": "3\n"},
    ])
    assert PARSERS["grok"].list_files(str(tmp_path)) == [p]  # subagents/ copies are not listed
    [s] = parse_file("grok", p)
    assert (s.session_id, s.name, s.cwd, s.parent) == ("child1", "Count files", "/tmp/p", "parent1")
    assert kinds(s) == ["context", "user", "thinking", "tool"]
    assert "command: find . | wc -l" in s.chunks[-1].text and "zzz" not in "".join(c.text for c in s.chunks)
    assert (s.created, s.modified) == ("2026-07-31T10:13:27.574Z", "2026-07-31T10:15:02.118Z")


# -------------------------------------------------------------------------------------------------
# hermes
# -------------------------------------------------------------------------------------------------


def test_hermes_state_db(tmp_path):
    db = tmp_path / "state.db"
    con = sqlite3.connect(str(db))
    con.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, model TEXT, model_config TEXT, started_at REAL,
                               ended_at REAL, title TEXT, parent_session_id TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, tool_call_id TEXT,
                               tool_calls TEXT, tool_name TEXT, timestamp REAL, reasoning TEXT);
    """)
    con.execute("INSERT INTO sessions VALUES ('h1','cli','m','{\"cwd\": \"/w\"}',1777500000,1777500100,'Dir check',NULL)")
    con.execute("INSERT INTO sessions VALUES ('h2','cli','m','{}',1777500200,NULL,NULL,'h1')")
    con.execute("INSERT INTO messages VALUES (1,'h1','user','where am I',NULL,NULL,NULL,1777500001,NULL)")
    con.execute("INSERT INTO messages VALUES (2,'h1','assistant','',NULL,"
                "'[{\"id\":\"c1\",\"function\":{\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":\\\"pwd\\\"}\"}}]',"
                "NULL,1777500002,'think')")
    con.execute("INSERT INTO messages VALUES (3,'h1','tool','/w','c1',NULL,'shell',1777500003,NULL)")
    con.execute("INSERT INTO messages VALUES (4,'h2','user','[SYSTEM: The user has invoked the x skill]',NULL,NULL,NULL,1777500201,NULL)")
    con.commit()
    con.close()
    h1, h2 = sorted(parse_file("hermes", db), key=lambda s: s.session_id)
    assert (h1.name, h1.cwd, h1.parent) == ("Dir check", "/w", None)
    assert kinds(h1) == ["user", "thinking", "tool"] and "command: pwd" in h1.chunks[-1].text
    assert h1.created == "2026-04-29T22:00:00.000Z" and h1.modified == "2026-04-29T22:01:40.000Z"
    assert h2.parent == "h1" and kinds(h2) == ["context"]


def test_hermes_019_cwd_column_and_failed_terminal_call(tmp_path):
    # Hermes 0.19: the working directory is a column of sessions (model_config no longer has it), and
    # the terminal tool answers {"output", "exit_code", "error"} as JSON.
    db = tmp_path / "state.db"
    con = sqlite3.connect(str(db))
    con.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, model TEXT, model_config TEXT,
                               parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL, cwd TEXT,
                               git_branch TEXT, title TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, tool_call_id TEXT,
                               tool_calls TEXT, tool_name TEXT, timestamp REAL, reasoning TEXT);
    """)
    con.execute("INSERT INTO sessions VALUES ('20261125_020606_115c43','cli','mock-model',"
                "'{\"max_iterations\": 90, \"reasoning_config\": null}',NULL,1795572368.39054,NULL,"
                "'/home/u/work',NULL,NULL)")
    calls = '[{"id": "call_%s", "call_id": "call_%s", "type": "function", "function": {"name": "terminal", ' \
            '"arguments": "{\\"command\\": \\"%s\\"}"}}]'
    rows = [(1, "user", "Check the canary", None, None, None),
            (2, "assistant", "", None, calls % ("a", "a", "echo canary-1 && ls"), None),
            (3, "tool", '{"output": "canary-1", "exit_code": 0, "error": null}', "call_a", None, "terminal"),
            (4, "assistant", "", None, calls % ("b", "b", "echo fail-x; exit 3"), None),
            (5, "tool", '{"output": "fail-x", "exit_code": 3, "error": null}', "call_b", None, "terminal")]
    for i, role, content, tcid, tcalls, tname in rows:
        con.execute("INSERT INTO messages VALUES (?,?,?,?,?,?,?,?,NULL)",
                    (i, "20261125_020606_115c43", role, content, tcid, tcalls, tname, 1795572368.4 + i))
    con.commit()
    con.close()
    [s] = parse_file("hermes", db)
    assert s.cwd == "/home/u/work"
    ok, failed = [c.text for c in s.chunks if c.kind == "tool"]
    assert ok == "tool: terminal\ncommand: echo canary-1 && ls\noutput:\ncanary-1"
    assert failed == "tool: terminal\ncommand: echo fail-x; exit 3\nerror:\nfail-x"


def test_hermes_unknown_sqlite_schema(tmp_path):
    db = tmp_path / "state.db"
    con = sqlite3.connect(str(db))
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    with pytest.raises(NotASessionFile):
        parse_file("hermes", db)


def test_hermes_legacy_json(tmp_path):
    p = tmp_path / "session_1.json"
    p.write_text(json.dumps({"session_id": "s1", "session_start": "2026-04-29T20:00:00Z",
                             "last_updated": "2026-04-29T20:00:04Z", "model_config": {"cwd": "/x"},
                             "messages": [{"role": "user", "content": "hello"}, {"role": "session_meta"}]}))
    [s] = parse_file("hermes", p)
    assert (s.session_id, s.cwd, texts(s, "user")) == ("s1", "/x", ["hello"])


def hermes_db(path, sessions, messages):
    """A state.db (0.19 columns) with (id, title, started_at) sessions and (session, role, content, time) messages."""
    con = sqlite3.connect(str(path))
    con.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, model TEXT, model_config TEXT, parent_session_id TEXT,
                               started_at REAL, ended_at REAL, cwd TEXT, title TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, tool_call_id TEXT,
                               tool_calls TEXT, tool_name TEXT, timestamp REAL, reasoning TEXT);""")
    for sid, title, start in sessions:
        con.execute("INSERT INTO sessions VALUES (?,'telegram','m','{}',NULL,?,NULL,'/srv/bot',?)", (sid, start, title))
    for i, (sid, role, content, ts) in enumerate(messages):
        con.execute("INSERT INTO messages VALUES (?,?,?,?,NULL,NULL,NULL,?,NULL)", (i + 1, sid, role, content, ts))
    con.commit()
    con.close()


def test_hermes_session_in_state_db_and_its_json_and_gateway_copies_is_one_session(env, tmp_path, capsys):
    # Hermes keeps a gateway session in state.db and again as sessions/session_<id>.json and
    # sessions/<id>.jsonl; each copy holds messages the others lack, the copies' times are naive.
    home = tmp_path / "home" / ".hermes"
    (home / "sessions").mkdir(parents=True)
    sid = "20260420_130311_1e415720"
    hermes_db(home / "state.db", [(sid, "Database access", 1776690191)],
              [(sid, "user", "set up the postgres reader", 1776690192),
               (sid, "assistant", "The reader is configured.", 1776690193),
               (sid, "user", "thanks, one more thing", 1776690300)])
    naive = "2026-04-20T18:33:15.089124"
    write_file(home / "sessions" / ("session_%s.json" % sid), {
        "session_id": sid, "session_start": naive, "last_updated": naive, "messages": [
            {"role": "user", "content": "set up the postgres reader"},
            {"role": "assistant", "content": "The reader is configured."},
            {"role": "user", "content": "now add the feedback suggestions table"},
            {"role": "assistant", "content": "Feedback table ready."}]})
    write_jsonl(home / "sessions" / (sid + ".jsonl"), [
        {"role": "session_meta", "tools": [], "model": "m"},
        {"role": "user", "content": "set up the postgres reader", "timestamp": naive},
        {"role": "assistant", "content": "Gateway-only kookaburra note.", "timestamp": naive}])
    write_file(home / "sessions" / "session_20260421_090000_aaaaaa.json", {
        "session_id": "20260421_090000_aaaaaa", "session_start": naive, "last_updated": naive,
        "messages": [{"role": "user", "content": "a legacy wombat question"}]})
    write_jsonl(home / "sessions" / "20260422_090000_bbbbbb.jsonl", [
        {"role": "session_meta", "tools": []},
        {"role": "user", "content": "a gateway numbat question", "timestamp": "2026-04-22T09:00:01.000000"}])
    write_config({"sources": [{"parser": "hermes", "path": str(home / "state.db")},
                              {"parser": "hermes", "path": str(home / "sessions")}]}, tmp_path)
    assert index_json(capsys)["sessions"] == 3
    assert search_ids(capsys, "postgres reader") == [sid]
    code, out, _ = run(capsys, "show", sid, "--json", "--max-chars", "0")
    shown = json.loads(out)
    assert shown["session"]["name"] == "Database access"
    assert shown["session"]["created"] == "2026-04-20T13:03:11.000Z"
    said = [c["text"] for c in shown["chunks"]]
    # each copy's own messages after the last message it shares with the db: nothing twice, nothing lost
    assert said == ["set up the postgres reader", "Gateway-only kookaburra note.", "The reader is configured.",
                    "now add the feedback suggestions table", "Feedback table ready.", "thanks, one more thing"]
    assert search_ids(capsys, "wombat") == ["20260421_090000_aaaaaa"]
    assert search_ids(capsys, "numbat") == ["20260422_090000_bbbbbb"]
    # The legacy session appears in the db (Hermes migrated it): the db owns it from the next run on.
    con = sqlite3.connect(str(home / "state.db"))
    con.execute("INSERT INTO sessions VALUES ('20260421_090000_aaaaaa','cli','m','{}',NULL,1776762000,NULL,NULL,"
                "'Wombat care')")
    con.commit()
    con.close()
    assert index_json(capsys)["sessions"] == 3
    code, out, _ = run(capsys, "search", "wombat", "--json")
    [found] = json.loads(out)["results"]
    assert (found["sessionId"], found["name"]) == ("20260421_090000_aaaaaa", "Wombat care")


# -------------------------------------------------------------------------------------------------
# antigravity
# -------------------------------------------------------------------------------------------------


def test_antigravity_argument_values_are_json_decoded_and_a_too_deep_one_stays_text():
    decode = PARSERS["antigravity"]._decode
    assert decode('"/tmp/repo"') == "/tmp/repo" and decode("5") == 5 and decode("null") == "null"
    assert decode("plain words") == "plain words" and decode("[" * 100000) == "[" * 100000   # no RecursionError


def test_antigravity_user_request_and_ordered_tool_outputs(tmp_path):
    p = write_jsonl(tmp_path / "conv-1" / ".system_generated" / "logs" / "transcript.jsonl", [
        {"step_index": 0, "source": "USER_EXPLICIT", "type": "USER_INPUT", "created_at": "2026-06-26T21:16:16Z",
         "content": "<USER_REQUEST>\nList the files.\n</USER_REQUEST>\n<USER_SETTINGS_CHANGE>model</USER_SETTINGS_CHANGE>"},
        {"step_index": 1, "source": "MODEL", "type": "PLANNER_RESPONSE", "created_at": "2026-06-26T21:16:17Z",
         "thinking": "list it", "tool_calls": [{"name": "list_dir", "args": {"DirectoryPath": "\"/tmp/repo\""}},
                                                {"name": "run_command", "args": {"CommandLine": "\"ls -a\""}}]},
        {"step_index": 2, "source": "MODEL", "type": "LIST_DIRECTORY", "created_at": "2026-06-26T21:16:18Z", "content": "a.txt"},
        {"step_index": 3, "source": "MODEL", "type": "RUN_COMMAND", "created_at": "2026-06-26T21:16:19Z", "content": ".\n..\na.txt"},
        {"step_index": 4, "source": "SYSTEM", "type": "SYSTEM_MESSAGE", "created_at": "2026-06-26T21:16:20Z", "content": "sys"},
    ])
    assert PARSERS["antigravity"].list_files(str(tmp_path)) == [p]
    [s] = parse_file("antigravity", p)
    assert s.session_id == "conv-1"
    assert texts(s, "user") == ["List the files."]
    assert texts(s, "context") == ["<USER_SETTINGS_CHANGE>model</USER_SETTINGS_CHANGE>", "sys"]
    t1, t2 = texts(s, "tool")
    assert "DirectoryPath: /tmp/repo" in t1 and "a.txt" in t1
    assert "CommandLine: ls -a" in t2 and ".." in t2
    assert [c.path for c in s.chunks if c.kind == "tool"] == ["/tmp/repo", None]


def test_traex_rollouts_under_trae_home_are_codex_sessions_of_their_own_agent(env, tmp_path, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    write_jsonl(cc_rollout(tmp_path / "home" / ".trae" / "cli"), [
        cc_cx_meta(),
        cc_cx_msg("2025-11-17T21:30:30.000Z", "user", "migrate the axolotl importer to streaming"),
        cc_cx_msg("2025-11-17T21:30:31.000Z", "assistant", "Streaming it now."),
    ])
    [r] = search_json(capsys, "axolotl importer")["results"]
    assert (r["sessionId"], r["agent"], r["cwd"], r["resumeCommand"]) == (cc_TID, "traex", "/home/u/app", None)


def test_claude_desktop_agent_mode_tasks_take_their_title_and_folder_from_the_task_metadata(env, tmp_path, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    ws = tmp_path / "home" / ".config" / "Claude" / "local-agent-mode-sessions" / "org1" / "ws1"
    write_file(ws / "local_5000.json", {"sessionId": "local_5000", "cliSessionId": cc_SID, "title": "Quarterly report",
                                        "userSelectedFolders": ["/home/u/reports"], "createdAt": 1767865803494,
                                        "lastActivityAt": 1767865903494})
    write_jsonl(ws / "local_5000" / ".claude" / "projects" / "-sessions-x" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-21T06:19:38.056Z", "summarise the pangolin sales spreadsheet"),
        cc_cl_asst("a1", "2026-01-21T06:19:40.000Z", "m1", [{"type": "text", "text": "Sales rose 4%."}]),
    ])
    [r] = search_json(capsys, "pangolin")["results"]
    assert (r["agent"], r["name"], r["cwd"]) == ("claude-desktop", "Quarterly report", "/home/u/reports")



# -------------------------------------------------------------------------------------------------
# continue
# -------------------------------------------------------------------------------------------------


def continue_session(sid="c0ffee00-1111", title="Fix the flaky websocket test", cwd="file:///home/u/chat%20app"):
    return {"sessionId": sid, "title": title, "workspaceDirectory": cwd, "history": [
        {"message": {"role": "user", "content": [{"type": "text", "text": "the websocket reconnect test is flaky"}]},
         "contextItems": [{"name": "ws.test.ts", "description": "file", "content": "describe('reconnect')",
                           "id": {"providerTitle": "file", "itemId": "1"}}]},
        {"message": {"role": "assistant", "content": "Let me run it.",
                     "toolCalls": [{"id": "tc1", "type": "function",
                                    "function": {"name": "run_terminal_command", "arguments": "{\"command\": \"npm test ws\"}"}}]},
         "contextItems": [], "reasoning": {"active": False, "text": "a timer race", "startAt": 1},
         "toolCallState": {"toolCallId": "tc1", "status": "done",
                           "toolCall": {"id": "tc1", "type": "function",
                                        "function": {"name": "run_terminal_command", "arguments": "{\"command\": \"npm test ws\"}"}},
                           "output": [{"name": "Terminal", "description": "", "content": "1 failing: ETIMEDOUT"}]}},
        {"message": {"role": "assistant", "content": "The fake timers leak between tests."}, "contextItems": []},
    ]}


def test_continue_session_roles_tools_context_name_cwd_and_creation_time(tmp_path):
    folder = tmp_path / "sessions"
    p = write_file(folder / "c0ffee00-1111.json", continue_session())
    write_file(folder / "sessions.json", [{"sessionId": "c0ffee00-1111", "title": "x", "dateCreated": "1767865803494",
                                           "workspaceDirectory": "file:///home/u/chat%20app"}])
    assert PARSERS["continue"].list_files(str(folder)) == [str(p)]   # the list of sessions is not one
    PARSERS["continue"].new_run()
    [s] = parse_file("continue", p)
    assert (s.session_id, s.name, s.cwd) == ("c0ffee00-1111", "Fix the flaky websocket test", "/home/u/chat app")
    assert kinds(s) == ["context", "user", "thinking", "assistant", "tool", "assistant"]
    assert texts(s, "user") == ["the websocket reconnect test is flaky"]
    tool = texts(s, "tool")[0]
    assert "command: npm test ws" in tool and "ETIMEDOUT" in tool
    assert s.created == "2026-01-08T09:50:03.494Z" and s.modified >= s.created


def test_a_resumed_old_continue_session_is_found_at_once_from_any_folder(env, capsys, monkeypatch, tmp_path,
                                                                        counted_stats):
    """Continue rewrites a session's file in place (its folder's time stays) and then sessions.json,
    the list of sessions, at every save: a change of that list opens a window in which each search
    compares Continue's files, closed once the resumed (quiet) session has been read."""
    folder = tmp_path / "home" / ".continue" / "sessions"
    ids = ["c0ffee00-%04d" % i for i in range(6)]
    paths = {sid: write_file(folder / (sid + ".json"), continue_session(sid=sid, title="Old chat %s" % sid))
             for sid in ids}
    listing = [{"sessionId": sid, "title": "Old chat", "dateCreated": "1767865803494",
                "workspaceDirectory": "file:///home/u/a", "messageCount": 2} for sid in ids]
    write_file(folder / "sessions.json", listing)
    write_config({"sources": [{"parser": "continue", "path": str(folder)}]}, tmp_path)
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.chdir(tmp_path)
    assert search_ids(capsys, "websocket reconnect") != []

    def save(sid, text):   # what Continue's save() does: the session's file, then the list
        data = continue_session(sid=sid, title="Old chat %s" % sid)
        data["history"].append({"message": {"role": "user", "content": text}, "contextItems": []})
        with open(str(paths[sid]), "w") as f:   # in place, as writeFileSync does
            f.write(json.dumps(data))
        with open(str(folder / "sessions.json"), "w") as f:
            f.write(json.dumps(listing))
    save(ids[3], "resumed: the capybara migration")
    assert search_ids(capsys, "capybara") == [ids[3]]
    del counted_stats[:]
    assert search_ids(capsys, "websocket reconnect") != []
    assert set(counted_stats) <= {str(paths[ids[3]])}   # the window closed once it was read
    with open(str(paths[ids[4]]), "w") as f:   # a file changed without the list: left to the sweep
        f.write(json.dumps(dict(continue_session(sid=ids[4]), title="the okapi notes")))
    assert search_ids(capsys, "okapi") == []


def test_continue_newer_tool_call_states_list_gives_each_call_its_output(tmp_path):
    data = continue_session()
    item = data["history"][1]
    item["toolCallStates"] = [dict(item.pop("toolCallState"), output=[{"name": "Tool Result", "content": "2 failing"}])]
    PARSERS["continue"].new_run()
    [s] = parse_file("continue", write_file(tmp_path / "c.json", data))
    assert "2 failing" in texts(s, "tool")[0]


def test_continue_placeholder_title_is_no_name_and_other_json_is_refused(tmp_path):
    PARSERS["continue"].new_run()
    [s] = parse_file("continue", write_file(tmp_path / "a.json", continue_session(title="New Session")))
    assert s.name is None and s.created.endswith("Z")
    with pytest.raises(NotASessionFile):
        parse_file("continue", write_file(tmp_path / "config.json", {"models": []}))


# -------------------------------------------------------------------------------------------------
# copilot-chat (VS Code)
# -------------------------------------------------------------------------------------------------

def vscode_request(rid, ts, text, response):
    return {"requestId": rid, "timestamp": ts, "message": {"text": text, "parts": []},
            "variableData": {"variables": []}, "response": response, "modelId": "copilot/gpt-5"}


def vscode_chat(sid="0c1d2e3f-aaaa", requests=()):
    return {"version": 3, "sessionId": sid, "creationDate": 1767865803494, "lastMessageDate": 1767865903494,
            "requesterUsername": "u", "responderUsername": "GitHub Copilot", "initialLocation": "panel",
            "requests": list(requests)}


def vscode_workspace(user, folder="file:///home/u/shop"):
    ws = user / "workspaceStorage" / "5f1e0a"
    write_file(ws / "workspace.json", {"folder": folder})
    return ws / "chatSessions"


def test_copilot_chat_json_session_markdown_tools_thinking_and_workspace(tmp_path):
    chats = vscode_workspace(tmp_path / "User")
    data = vscode_chat(requests=[vscode_request("r1", 1767865804000, "why are thumbnails slow on the catalog page?", [
        {"kind": "thinking", "value": "check the image pipeline"},
        {"value": "The thumbnails are served as PNG from "},
        {"kind": "inlineReference", "inlineReference": {"scheme": "file", "path": "/home/u/shop/src/thumbs.ts",
                                                         "fsPath": "/home/u/shop/src/thumbs.ts"}},
        {"kind": "markdownContent", "content": {"value": "; switch them to WebP."}},
        {"kind": "toolInvocationSerialized", "toolId": "run_in_terminal", "toolCallId": "t1",
         "invocationMessage": "Running a command", "isComplete": True,
         "toolSpecificData": {"kind": "terminal", "commandLine": {"original": "npx sharp-cli --webp"},
                              "terminalCommandOutput": {"text": "converted 120 images"}}},
        {"kind": "undoStop", "id": "x"},
    ])])
    data["customTitle"] = "WebP thumbnails"
    p = write_file(chats / "0c1d2e3f-aaaa.json", data)
    assert PARSERS["copilot-chat"].list_files(str(tmp_path / "User" / "workspaceStorage")) == [str(p)]
    report = ParseReport()
    [s] = PARSERS["copilot-chat"].parse(str(p), report)
    assert (s.session_id, s.name, s.cwd) == ("0c1d2e3f-aaaa", "WebP thumbnails", "/home/u/shop")
    assert kinds(s) == ["user", "thinking", "assistant", "tool"]
    assert texts(s, "assistant") == ["The thumbnails are served as PNG from `thumbs.ts`; switch them to WebP."]
    assert "command: npx sharp-cli --webp" in texts(s, "tool")[0] and "converted 120 images" in texts(s, "tool")[0]
    assert (s.created, s.modified) == ("2026-01-08T09:50:03.494Z", "2026-01-08T09:51:43.494Z")
    assert report.unknown == {}


def test_copilot_chat_jsonl_mutation_log_is_replayed_and_wins_over_the_old_json(tmp_path):
    chats = vscode_workspace(tmp_path / "User")
    write_file(chats / "0c1d2e3f-bbbb.json", vscode_chat("0c1d2e3f-bbbb"))   # the older form of the same session
    first = vscode_request("r1", 1767865804000, "rename the payment webhook handler", [])
    p = write_jsonl(chats / "0c1d2e3f-bbbb.jsonl", [
        {"kind": 0, "v": vscode_chat("0c1d2e3f-bbbb", [first])},
        {"kind": 2, "k": ["requests", 0, "response"], "v": [{"value": "Renamed it to handleStripeEvent."}]},
        {"kind": 2, "k": ["requests"], "v": [vscode_request("r2", 1767865904000, "now add a retry", [])]},
        {"kind": 2, "k": ["requests", 1, "response"], "v": [{"value": "draft"}]},
        {"kind": 2, "k": ["requests", 1, "response"], "i": 0, "v": [{"value": "Added exponential backoff."}]},
        {"kind": 1, "k": ["customTitle"], "v": "Stripe webhook"},
        {"kind": 3, "k": ["inputState"]},
        {"kind": 7, "k": ["x"]},
    ])
    assert PARSERS["copilot-chat"].list_files(str(tmp_path / "User" / "workspaceStorage")) == [p]
    report = ParseReport()
    [s] = PARSERS["copilot-chat"].parse(p, report)
    assert s.name == "Stripe webhook" and s.cwd == "/home/u/shop"
    assert texts(s, "user") == ["rename the payment webhook handler", "now add a retry"]
    assert texts(s, "assistant") == ["Renamed it to handleStripeEvent.", "Added exponential backoff."]
    assert report.unknown == {"mutation kind 7": 1}


def test_copilot_chat_sessions_are_found_where_vscode_keeps_them(env, tmp_path, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    user = tmp_path / "home" / ".config" / "Code" / "User"
    os.makedirs(user / "globalStorage")
    chats = vscode_workspace(user)
    write_file(chats / "0c1d2e3f-cccc.json", vscode_chat("0c1d2e3f-cccc", [
        vscode_request("r1", 1767865804000, "the kubernetes ingress returns 502", [{"value": "Check the readiness probe."}])]))
    write_jsonl(user / "globalStorage" / "emptyWindowChatSessions" / "0c1d2e3f-dddd.jsonl", [
        {"kind": 0, "v": vscode_chat("0c1d2e3f-dddd", [vscode_request("r1", 1767865805000, "explain the ingress annotation", [])])}])
    code, out, err = run(capsys, "search", "ingress", "--json", "--agent", "copilot-chat")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert sorted(r["sessionId"] for r in results) == ["0c1d2e3f-cccc", "0c1d2e3f-dddd"]
    assert {r["sessionId"]: r["cwd"] for r in results}["0c1d2e3f-cccc"] == "/home/u/shop"


# -------------------------------------------------------------------------------------------------
# omp, openclaude
# -------------------------------------------------------------------------------------------------


def test_omp_sessions_in_its_home_and_profiles_are_pi_sessions_of_their_own_agent(env, tmp_path, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    home = tmp_path / "home"
    PiWriter(home / ".omp" / "agent" / "sessions", "omp-0001").user("the quokka cache eviction").save()
    PiWriter(home / ".omp" / "profiles" / "work" / "agent" / "sessions", "omp-0002").user("quokka profile run").save()
    code, out, err = run(capsys, "search", "quokka", "--json", "--fields", "full")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert sorted((r["sessionId"], r["agent"]) for r in results) == [("omp-0001", "omp"), ("omp-0002", "omp")]
    assert all(r["resumeCommand"] == "omp --session " + r["path"] for r in results)


def test_openclaude_transcripts_are_claude_code_sessions_resumed_with_openclaude(env, tmp_path, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    write_jsonl(tmp_path / "home" / ".openclaude" / "projects" / "-home-u-proj" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-21T06:19:38.056Z", "why does the flux capacitor leak?"),
        cc_cl_asst("a1", "2026-01-21T06:19:40.000Z", "m1", [{"type": "text", "text": "A loose gasket."}]),
    ])
    [r] = search_json(capsys, "flux capacitor")["results"]
    assert (r["sessionId"], r["agent"]) == (cc_SID, "openclaude")
    assert r["resumeCommand"] == "cd /home/u/proj && openclaude --resume " + cc_SID


# -------------------------------------------------------------------------------------------------
# zed
# -------------------------------------------------------------------------------------------------


def zed_store(path, rows):
    """A Zed threads.db with the columns of crates/agent/src/db.rs; rows: (id, data_type, data, parent, folders)."""
    import sqlite3
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE threads (id TEXT PRIMARY KEY, summary TEXT NOT NULL, updated_at TEXT NOT NULL, "
                "data_type TEXT NOT NULL, data BLOB NOT NULL, parent_id TEXT, folder_paths TEXT, "
                "folder_paths_order TEXT, created_at TEXT)")
    for tid, data_type, data, parent, folders in rows:
        con.execute("INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                    (tid, "Title of " + tid, "2026-02-01T10:05:00+00:00", data_type, data, parent, folders,
                     "2026-02-01T10:00:00+00:00"))
    con.commit()
    con.close()
    return str(path)


ZED_THREAD = {"version": "0.3.0", "title": "t", "updated_at": "2026-02-01T10:05:00Z", "messages": [
    {"User": {"id": "u1", "content": [{"Text": "why is the tokio runtime starving?"},
                                      {"Mention": {"uri": "file:///p/src/main.rs", "content": "fn main() {}"}}]}},
    {"Agent": {"content": [{"Thinking": {"text": "blocking call in async", "signature": None}},
                           {"Text": "A blocking read holds the worker."},
                           {"ToolUse": {"id": "t1", "name": "grep", "raw_input": "{}", "input": {"regex": "std::fs::read"},
                                        "is_input_complete": True}}],
               "tool_results": {"t1": {"tool_use_id": "t1", "tool_name": "grep", "is_error": False,
                                       "content": {"Text": "src/io.rs:12 std::fs::read"}, "output": None}}}},
    "Resume",
]}

ZED_LEGACY = {"version": "0.2.0", "summary": "old", "updated_at": "2026-01-01T10:00:00Z", "messages": [
    {"id": 0, "role": "user", "segments": [{"type": "text", "text": "port the legacy websocket server"}],
     "tool_uses": [], "tool_results": [], "context": ""},
    {"id": 1, "role": "assistant", "segments": [{"type": "text", "text": "Use axum's upgrade."}],
     "tool_uses": [{"id": "x", "name": "read_file", "input": {"path": "server.rs"}}],
     "tool_results": [{"tool_use_id": "x", "is_error": False, "content": "mod ws;", "output": None}], "context": ""},
], "initial_project_snapshot": {"worktree_snapshots": [{"worktree_path": "/home/u/legacy", "git_state": None}]}}


def test_zed_threads_current_and_legacy_json_with_tools_mentions_parent_and_project(tmp_path):
    p = zed_store(tmp_path / "zed" / "threads" / "threads.db", [
        ("th-1", "json", json.dumps(ZED_THREAD), None, "/home/u/rt\n/home/u/other"),
        ("th-2", "json", json.dumps(ZED_LEGACY), "th-1", None),
    ])
    assert PARSERS["zed"].list_files(str(tmp_path / "zed" / "threads")) == [p]
    report = ParseReport()
    one, two = PARSERS["zed"].parse(p, report)
    assert (one.session_id, one.name, one.cwd, one.parent) == ("th-1", "Title of th-1", "/home/u/rt", None)
    assert kinds(one) == ["user", "context", "thinking", "assistant", "tool"]
    assert "regex: std::fs::read" in texts(one, "tool")[0] and "src/io.rs:12" in texts(one, "tool")[0]
    assert (one.created, one.modified) == ("2026-02-01T10:00:00.000Z", "2026-02-01T10:05:00.000Z")
    assert (two.cwd, two.parent) == ("/home/u/legacy", "th-1")
    assert texts(two, "user") == ["port the legacy websocket server"] and "mod ws;" in texts(two, "tool")[0]
    assert report.unknown == {} and report.skipped == {}


def test_zed_zstd_threads_are_read_with_the_zstd_command_or_counted_as_skipped(tmp_path, monkeypatch):
    import shutil
    import subprocess
    exe = shutil.which("zstd")
    if not exe:
        pytest.skip("no zstd command to compress the fixture with")
    packed = subprocess.run([exe, "-c", "-q"], input=json.dumps(ZED_THREAD).encode(), stdout=subprocess.PIPE,
                            check=True).stdout
    p = zed_store(tmp_path / "threads.db", [("th-z", "zstd", packed, None, "/home/u/rt"),
                                            ("th-bad", "zstd", b"not zstd", None, None)])
    report = ParseReport()
    [s] = PARSERS["zed"].parse(p, report)
    assert s.session_id == "th-z" and "A blocking read holds the worker." in texts(s, "assistant")
    assert sum(report.skipped.values()) == 1          # the damaged thread is counted, the rest read
    monkeypatch.setattr(sesame, "_zstd_module", lambda: None)   # no decompressor on this machine
    monkeypatch.setattr(shutil, "which", lambda name: None)
    report = ParseReport()
    assert PARSERS["zed"].parse(p, report) == [] and sum(report.skipped.values()) == 2


# -------------------------------------------------------------------------------------------------
# vibe, openhands, kiro, warp
# -------------------------------------------------------------------------------------------------


def test_vibe_session_folder_messages_meta_tools_and_injected_context(tmp_path):
    folder = tmp_path / "session_20260201_100000_ab12cd34"
    write_file(folder / "meta.json", {"session_id": "ab12cd34-full", "parent_session_id": None, "title": "Flaky retry",
                                      "start_time": "2026-02-01T10:00:00Z", "end_time": "2026-02-01T10:09:00Z",
                                      "environment": {"working_directory": "/home/u/svc"}})
    p = write_jsonl(folder / "messages.jsonl", [
        {"role": "system", "content": "You are Vibe."},
        {"role": "user", "content": "the payment retry loop never stops", "message_id": "m1"},
        {"role": "user", "content": "<reminder>plan mode</reminder>", "injected": True},
        {"role": "assistant", "content": "Let me read it.", "reasoning_content": "check the backoff cap",
         "tool_calls": [{"id": "c1", "index": 0, "function": {"name": "read_file", "arguments": "{\"path\": \"retry.py\"}"}}]},
        {"role": "tool", "content": "while True: retry()", "tool_call_id": "c1", "name": "read_file"},
    ])
    assert PARSERS["vibe"].list_files(str(tmp_path)) == [p]
    [s] = parse_file("vibe", p)
    assert (s.session_id, s.name, s.cwd) == ("ab12cd34-full", "Flaky retry", "/home/u/svc")
    assert kinds(s) == ["context", "user", "context", "thinking", "assistant", "tool"]
    assert s.chunks[-1].path == "retry.py" and "while True" in s.chunks[-1].text
    assert (s.created, s.modified) == ("2026-02-01T10:00:00.000Z", "2026-02-01T10:09:00.000Z")


def test_openhands_conversation_folder_events_in_order_with_actions_joined_to_observations(tmp_path):
    conv = tmp_path / "9f8e7d6c"
    write_file(conv / "base_state.json", {"id": "9f8e7d6c-full", "agent": {"llm": {"model": "x"}},
                                          "workspace": {"working_dir": "/home/u/api"}})
    events = [
        {"kind": "SystemPromptEvent", "timestamp": "2026-02-01T10:00:00Z", "source": "agent", "system_prompt": {}},
        {"kind": "MessageEvent", "timestamp": "2026-02-01T10:00:01Z", "source": "user",
         "llm_message": {"role": "user", "content": [{"type": "text", "text": "the healthcheck endpoint times out"}]}},
        {"kind": "ActionEvent", "timestamp": "2026-02-01T10:00:05Z", "source": "agent", "tool_name": "terminal",
         "tool_call_id": "tc1", "thought": [{"type": "text", "text": "Run the probe."}],
         "tool_call": {"name": "terminal", "arguments": "{\"command\": \"curl -m 2 localhost:8080/health\"}"},
         "action": {"kind": "TerminalAction", "command": "curl -m 2 localhost:8080/health"}},
        {"kind": "ObservationEvent", "timestamp": "2026-02-01T10:00:08Z", "source": "environment", "tool_name": "terminal",
         "tool_call_id": "tc1", "observation": {"content": [{"type": "text", "text": "curl: (28) timed out"}],
                                                "metadata": {"exit_code": 28, "working_dir": "/home/u/api"}}},
        {"kind": "MessageEvent", "timestamp": "2026-02-01T10:01:00Z", "source": "agent",
         "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "The DB pool is exhausted."}]}},
        {"kind": "BrandNewEvent", "timestamp": "2026-02-01T10:01:01Z"},
    ]
    for i, ev in enumerate(events):
        write_file(conv / "events" / ("event-%05d-x.json" % i), ev)
    p = str(conv / "base_state.json")
    assert PARSERS["openhands"].list_files(str(tmp_path)) == [p]
    report = ParseReport()
    [s] = PARSERS["openhands"].parse(p, report)
    assert (s.session_id, s.cwd) == ("9f8e7d6c-full", "/home/u/api")
    assert kinds(s) == ["user", "assistant", "tool", "assistant"]
    tool = texts(s, "tool")[0]
    assert "curl -m 2" in tool and "timed out" in tool and "error:" in tool
    assert report.unknown == {"event BrandNewEvent": 1}
    assert (s.created, s.modified) == ("2026-02-01T10:00:00.000Z", "2026-02-01T10:01:01.000Z")


def test_kiro_cli_turns_tools_and_companion_metadata(tmp_path):
    write_file(tmp_path / "k1.json", {"session_id": "k1", "cwd": "/home/u/infra", "title": "Terraform drift",
                                      "created_at": "2026-02-01T10:00:00Z", "updated_at": "2026-02-01T10:05:00Z"})
    p = write_jsonl(tmp_path / "k1.jsonl", [
        {"version": "v1", "kind": "Prompt", "data": {"content": [{"kind": "text", "data": "why does terraform plan show drift?"}]}},
        {"version": "v1", "kind": "AssistantMessage", "data": {"content": [
            {"kind": "text", "data": "Checking the state."},
            {"kind": "toolUse", "data": {"toolUseId": "t1", "name": "shell", "input": {"command": "terraform plan"}}}]}},
        {"version": "v1", "kind": "ToolResults", "data": {"content": [
            {"kind": "toolResult", "data": {"toolUseId": "t1", "content": [{"kind": "text", "data": "~ tags changed"}],
                                            "status": "success"}}]}},
    ])
    assert PARSERS["kiro"].list_files(str(tmp_path)) == [p]
    [s] = parse_file("kiro", p)
    assert (s.session_id, s.name, s.cwd) == ("k1", "Terraform drift", "/home/u/infra")
    assert kinds(s) == ["user", "assistant", "tool"]
    assert "command: terraform plan" in texts(s, "tool")[0] and "tags changed" in texts(s, "tool")[0]


def test_kiro_older_sqlite_store_conversations_with_prompts_tools_and_cwd(tmp_path):
    import sqlite3
    db = tmp_path / "data.sqlite3"
    con = sqlite3.connect(str(db))
    con.execute("CREATE TABLE conversations_v2 (key TEXT, conversation_id TEXT, value TEXT, created_at INTEGER, "
                "updated_at INTEGER, PRIMARY KEY (key, conversation_id))")
    value = {"history": [
        {"user": {"content": {"Prompt": {"prompt": "list the s3 buckets without encryption"}}, "timestamp": "2026-02-01T10:00:00Z"},
         "assistant": {"ToolUse": {"message_id": "m1", "content": "Checking.",
                                   "tool_uses": [{"id": "t1", "name": "use_aws", "args": {"service_name": "s3"}}]}}},
        {"user": {"content": {"ToolUseResults": {"tool_use_results": [
            {"tool_use_id": "t1", "content": [{"Text": "bucket-a: none"}], "status": "Success"}]}}},
         "assistant": {"Response": {"message_id": "m2", "content": "bucket-a has no encryption."}}},
    ]}
    con.execute("INSERT INTO conversations_v2 VALUES ('/home/u/infra', 'conv-9', ?, 1767865803494, 1767865903494)",
                (json.dumps(value),))
    con.commit()
    con.close()
    assert PARSERS["kiro"].list_files(str(tmp_path)) == [str(db)]
    [s] = parse_file("kiro", db)
    assert (s.session_id, s.cwd) == ("conv-9", "/home/u/infra")
    assert kinds(s) == ["user", "assistant", "tool", "assistant"]
    assert "service_name: s3" in texts(s, "tool")[0] and "bucket-a: none" in texts(s, "tool")[0]


def test_devin_cli_store_sessions_nodes_tools_and_hidden_sessions_left_out(tmp_path):
    import sqlite3
    db = tmp_path / "devin" / "cli" / "sessions.db"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(str(db))
    con.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT, working_directory TEXT, model TEXT, "
                "created_at INTEGER, last_activity_at INTEGER, hidden INTEGER)")
    con.execute("CREATE TABLE message_nodes (row_id INTEGER PRIMARY KEY, session_id TEXT, node_id TEXT, "
                "parent_node_id TEXT, chat_message TEXT, created_at INTEGER)")
    con.execute("INSERT INTO sessions VALUES ('d1', 'Fix the cron parser', '/home/u/sched', 'm', 1767865800, 1767865900, 0)")
    con.execute("INSERT INTO sessions VALUES ('d2', 'hidden one', '/x', 'm', 1767865800, 1767865900, 1)")
    for i, m in enumerate([
            {"role": "system", "content": "You are Devin."},
            {"role": "user", "content": "the cron parser rejects */15"},
            {"role": "assistant", "content": "Looking.", "thinking": "step syntax",
             "tool_calls": [{"id": "c1", "function": {"name": "exec", "arguments": "{\"command\": \"pytest cron\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1 failed"}]):
        con.execute("INSERT INTO message_nodes VALUES (?, 'd1', ?, NULL, ?, ?)", (i, "n%d" % i, json.dumps(m), 1767865801 + i))
    con.commit()
    con.close()
    [s] = parse_file("devin", db)
    assert (s.session_id, s.name, s.cwd) == ("d1", "Fix the cron parser", "/home/u/sched")
    assert kinds(s) == ["context", "user", "thinking", "assistant", "tool"]
    assert "command: pytest cron" in texts(s, "tool")[0] and "1 failed" in texts(s, "tool")[0]


def test_windsurf_cascade_files_are_listed_as_not_indexed_with_why(env, tmp_path, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    write_file(tmp_path / "home" / ".codeium" / "windsurf" / "cascade" / "c1.pb", "\x08\x96\x01 encrypted")
    code, out, err = run(capsys, "index")
    assert code == 0, err
    code, out, err = run(capsys, "status", "--json")
    reasons = {f["path"]: f["reason"] for f in json.loads(out)["notIndexed"]}
    assert [r for p, r in reasons.items() if p.endswith("c1.pb") and "encrypted" in r], reasons


def test_kiro_ide_continue_sessions_and_legacy_chat_files_with_kiros_own_prompt_as_context(tmp_path):
    root = tmp_path / "kiro.kiroagent"
    ws = root / "workspace-sessions" / "L2hvbWUvdS9hcHA"
    write_file(ws / "sessions.json", [{"sessionId": "ki-1", "title": "t", "dateCreated": "1767865803494"}])
    p = write_file(ws / "ki-1.json", {"sessionId": "ki-1", "title": "Spec the billing page", "workspaceDirectory": "/home/u/app",
                                      "history": [{"message": {"role": "user", "content": "# System Prompt\nYou are Kiro"}},
                                                  {"message": {"role": "user", "content": "write the spec for invoices"}},
                                                  {"message": {"role": "assistant", "content": "Here is requirements.md"}}]})
    chat = write_file(root / "a1b2c3" / "d4e5f6.chat", {"executionId": "x", "actionId": "y", "metadata": {
        "workflow": "act", "startTime": 1767865803494, "endTime": 1767865903494},
        "chat": [{"role": "user", "content": "<identity>Kiro</identity>"}, {"role": "user", "content": "fix the flaky cron"},
                 {"role": "assistant", "content": "The timezone was wrong."}]})
    assert sorted(PARSERS["kiro-ide"].list_files(str(root))) == sorted([str(chat), str(p)])
    PARSERS["kiro-ide"].new_run()
    [s] = parse_file("kiro-ide", p)
    assert (s.session_id, s.name, s.cwd) == ("ki-1", "Spec the billing page", "/home/u/app")
    assert kinds(s) == ["context", "user", "assistant"] and s.created == "2026-01-08T09:50:03.494Z"
    [c] = parse_file("kiro-ide", chat)
    assert (c.session_id, kinds(c)) == ("a1b2c3:d4e5f6", ["context", "user", "assistant"])
    assert (c.created, c.modified) == ("2026-01-08T09:50:03.494Z", "2026-01-08T09:51:43.494Z")


def dsh_log(unknown=None):
    ev = lambda n, t, data, **kw: dict({"type": t, "seq": n, "time": CT_MS + n * 1000, "data": data}, **kw)
    msg = lambda mid, role, content, kind: {"message": {"id": mid, "role": role, "content": content,
                                                        "source": {"kind": kind, "model": "m", "provider": "p"}}}
    lines = [{"type": "session", "version": 0, "id": "dsh-1", "createdAt": CT_MS, "cwd": "/home/u/etl",
              "delegationDepth": 0},
             ev(1, "turn/start", {"turn": 1}),
             ev(2, "user/message", msg("u1", "user", [{"type": "text", "text": "the parquet export drops nulls"}], "user"),
                surfaceOp="append"),
             ev(3, "user/message", msg("u2", "user", [{"type": "text", "text": "<env>cwd</env>"}], "system"),
                surfaceOp="append"),
             ev(4, "assistant/message", dict(msg("a1", "assistant", [
                 {"type": "reasoning", "text": "check the schema"}, {"type": "text", "text": "Reading the writer."},
                 {"type": "tool-call", "id": "c1", "name": "read", "arguments": "{\"path\": \"export.py\"}"}], "model"),
                 turn=1, step=1), surfaceOp="append"),
             ev(5, "tool/result", dict(msg("t1", "user", [{"type": "tool-result", "toolCallId": "c1",
                                                           "content": "df.dropna()"}], "tool"), turn=1, step=1),
                surfaceOp="append"),
             ev(6, "session/title", {"title": "Parquet nulls"}),
             ev(7, "compaction/summary", {"summary": "Nulls were dropped by dropna."})]
    if unknown:
        lines.append(ev(8, unknown, {}))
    return lines


def test_deepseek_harness_plain_and_zstd_logs(tmp_path):
    folder = tmp_path / "sessions" / "etl" / "session-dsh-1"
    plain = write_jsonl(folder / "session.jsonl", dsh_log("hologram_beam"))
    assert PARSERS["deepseek-harness"].list_files(str(tmp_path / "sessions")) == [plain]
    report = ParseReport()
    [s] = PARSERS["deepseek-harness"].parse(plain, report)
    assert (s.session_id, s.name, s.cwd) == ("dsh-1", "Parquet nulls", "/home/u/etl")
    assert kinds(s) == ["user", "context", "thinking", "assistant", "tool", "summary"]
    assert "path: export.py" in texts(s, "tool")[0] and "df.dropna()" in texts(s, "tool")[0]
    assert report.unknown == {"hologram_beam": 1}
    module, exe = sesame._zstd_module(), shutil.which("zstd")
    if module is None and exe is None:
        pytest.skip("no zstd to compress the fixture with")
    data = open(plain, "rb").read()
    packed = module.compress(data) if module else subprocess.run([exe, "-c", "-q"], input=data,
                                                                 stdout=subprocess.PIPE, check=True).stdout
    with open(plain + ".zstd", "wb") as f:
        f.write(packed)
    assert PARSERS["deepseek-harness"].list_files(str(tmp_path / "sessions")) == [plain + ".zstd"]   # the live one
    [z] = parse_file("deepseek-harness", plain + ".zstd")
    assert [c.text for c in z.chunks] == [c.text for c in s.chunks]


def trae_db(path, sessions):
    import sqlite3
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
    con.execute("INSERT INTO ItemTable VALUES ('memento/icube-ai-agent-storage', ?)", (json.dumps({"list": sessions}),))
    con.commit()
    con.close()
    return path


def test_trae_ide_workspace_chats_with_the_project_and_times(tmp_path):
    ws = tmp_path / "User" / "workspaceStorage" / "ab12"
    write_file(ws / "workspace.json", {"folder": "file:///home/u/shop"})
    db = trae_db(ws / "state.vscdb", [{"sessionId": "tr-1", "createdAt": 1767865803494, "updatedAt": 1767865903494,
                                        "messages": [{"role": "user", "content": "why is the cart badge stale",
                                                      "timestamp": 1767865804000},
                                                     {"role": "assistant", "content": "",
                                                      "agentTaskContent": {"text": "The store is not subscribed."}}]}])
    assert PARSERS["trae"].list_files(str(tmp_path / "User")) == [str(db)]
    [s] = parse_file("trae", db)
    assert (s.session_id, s.cwd, kinds(s)) == ("tr-1", "/home/u/shop", ["user", "assistant"])
    assert "not subscribed" in texts(s, "assistant")[0] and s.created == "2026-01-08T09:50:03.494Z"


def test_warp_prompts_grouped_by_conversation_with_utc_times(tmp_path):
    import sqlite3
    db = tmp_path / "warp.sqlite"
    con = sqlite3.connect(str(db))
    con.execute("CREATE TABLE ai_queries (id INTEGER PRIMARY KEY, exchange_id TEXT, conversation_id TEXT, "
                "start_ts DATETIME, input TEXT, working_directory TEXT, output_status TEXT, model_id TEXT)")
    for i, (conv, ts, text) in enumerate([("c1", "2026-04-07 08:55:40", "why is the docker build cache cold"),
                                          ("c1", "2026-04-07 09:01:00", "use buildx cache mounts"),
                                          ("c2", "2026-04-08 10:00:00", "rename the git branch")]):
        con.execute("INSERT INTO ai_queries VALUES (?, ?, ?, ?, ?, ?, 'Completed', 'auto')",
                    (i, "e%d" % i, conv, ts, json.dumps([{"Query": {"text": text, "context": []}}]), "/home/u/app"))
    con.commit()
    con.close()
    one, two = parse_file("warp", db)
    assert (one.session_id, one.cwd, texts(one, "user")) == ("c1", "/home/u/app", ["why is the docker build cache cold",
                                                                                  "use buildx cache mounts"])
    assert (one.created, one.modified) == ("2026-04-07T08:55:40.000Z", "2026-04-07T09:01:00.000Z")
    assert two.session_id == "c2"


# ---------------------------------------------------------------- the real-world corpus

REALWORLD = os.path.join(HERE, "..", "shared", "realworld")


@slow
def test_the_real_world_corpus_is_indexed_whole_with_every_file_accounted_for_and_drift_seen(tmp_path, monkeypatch, capsys):
    """656 real transcripts from public repositories (../shared/realworld), laid out as a new user's
    HOME and indexed without a config: no traceback, indexed + unchanged + not indexed = seen, every
    file not indexed has its reason, a record type nobody wrote is counted as drift for every agent
    with typed JSONL records, and no session without conversation is a search result."""
    if not os.path.isfile(os.path.join(REALWORLD, "build_home.py")):
        pytest.skip("../shared/realworld is not beside this checkout")
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_home", os.path.join(REALWORLD, "build_home.py"))
    build_home = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_home)
    home = str(tmp_path / "home")
    build_home.build(home)
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR",
                "PI_CODING_AGENT_DIR", "GEMINI_CLI_HOME", "COPILOT_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", home)
    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SESAME_CONFIG_DIR", str(tmp_path / "config"))
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and "Traceback" not in err, err
    summary = json.loads(out)
    assert summary["filesSeen"] > 400 and summary["sessions"] > 400
    assert summary["filesIndexed"] + summary["filesUnchanged"] + summary["filesSkipped"] == summary["filesSeen"]
    code, out, err = run(capsys, "status", "--json")
    status = json.loads(out)
    assert all(f["reason"] for f in status["notIndexed"]), status["notIndexed"]
    assert status["files"] == summary["filesSeen"]
    # No session without conversation among the results of broad searches.
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    kinds_sql = ",".join("'%s'" % k for k in sorted(sesame.CONVERSATION_KINDS))
    for query in ("the", "file error", "AGENTS.md instructions", "session"):
        code, out, err = run(capsys, "search", query, "--json", "--limit", "200", "--max-chars", "0")
        for r in json.loads(out)["results"]:
            said = con.execute("SELECT count(*) FROM chunks JOIN sessions s ON s.id = chunks.session WHERE "
                               "s.agent = ? AND s.session_id = ? AND chunks.kind IN (%s)" % kinds_sql,
                               (r["agent"], r["sessionId"])).fetchone()[0]
            assert said, (query, r["agent"], r["sessionId"])
    # Drift: one real file of each agent with typed JSONL records gets a record of a type nobody wrote.
    agents = {a["agent"] for a in status["perAgent"]}
    injected = {}
    for path, agent in con.execute("SELECT path, parser FROM files WHERE status = 'ok' ORDER BY path"):
        if agent in injected or not path.endswith(".jsonl") or not PARSERS[agent].records:
            continue
        with open(path, "rb") as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
        last = key = None
        for raw in reversed(lines[-50:]):   # the last record that has a type (not a `$set` update...)
            try:
                last = json.loads(raw)
            except ValueError:
                continue
            key = next((k for k in ("type", "kind", "role") if isinstance(last, dict) and isinstance(last.get(k), str)),
                       None)
            if key:
                break
        if key is None:
            continue
        last[key] = "hologram_beam"
        with open(path, "a") as f:
            f.write(json.dumps(last) + "\n")
        injected[agent] = path
    con.close()
    assert {"claude", "codex", "gemini", "pi", "copilot"} <= set(injected) <= agents
    code, out, err = run(capsys, "index")
    assert code == 0, err
    code, out, err = run(capsys, "status", "--json")
    drift = {a["agent"]: a.get("unrecognizedRecords", {}) for a in json.loads(out)["perAgent"]}
    for agent in injected:
        assert any(k.endswith("hologram_beam") for k in drift.get(agent, {})), (agent, drift.get(agent))
    # Every agent's sessions export (sesame serve shows a session with the HTML export's renderer).
    assert set(assert_every_agent_exports(capsys, str(tmp_path / "data" / "index.sqlite"), per_agent=5)) == agents


def assert_every_agent_exports(capsys, index_path, per_agent=None):
    """Each indexed session (the first per_agent of each agent) exports to HTML and Markdown: exit 0,
    a whole HTML page, Markdown with no code block left open, the first words said in both."""
    con = sqlite3.connect(index_path)
    rows = con.execute("SELECT s.agent, s.session_id, (SELECT c.text FROM chunks c WHERE c.session = s.id AND "
                       "c.kind IN ('user', 'assistant') ORDER BY c.seq LIMIT 1) FROM sessions s "
                       "WHERE s.session_id IN (SELECT session_id FROM sessions GROUP BY session_id HAVING count(*) = 1) "
                       "ORDER BY s.agent, s.id").fetchall()   # (an id two agents share would need its file)
    con.close()
    done = {}
    for agent, session_id, first in rows:
        if per_agent and done.get(agent, 0) >= per_agent:
            continue
        done[agent] = done.get(agent, 0) + 1
        word = max(re.findall(r"[A-Za-z]{4,}", sesame.unpack(first) if first else "") or [""], key=len)
        for fmt in ("html", "md"):
            code, out, err = show(capsys, session_id, "--format", fmt, "--no-refresh")
            assert code == 0 and "Traceback" not in err, (agent, session_id, fmt, err)
            if fmt == "html":
                assert out.startswith("<!DOCTYPE html>") and out.endswith("</html>\n"), (agent, session_id)
            else:
                assert sesame.md_closed(out) == out, (agent, session_id)
            assert word in out, (agent, session_id, fmt, word)
    return done


# -------------------------------------------------------------------------------------------------
# samples
# -------------------------------------------------------------------------------------------------

ot_SAMPLE_DIRS = [("droid", "factory-droid"), ("qwen", "qwen"), ("kimi", "kimi"), ("openclaw", "openclaw"),
               ("grok", "grok"), ("hermes", "hermes"), ("antigravity", "antigravity")]


@pytest.mark.parametrize("agent,folder", ot_SAMPLE_DIRS)
def test_samples(agent, folder):
    root = os.path.join(SAMPLES, folder)
    if not os.path.isdir(root):
        pytest.skip("samples absent")
    sessions = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                got = PARSERS[agent].parse(os.path.join(dirpath, f), ParseReport())
            except NotASessionFile:
                continue
            assert got, f
            for s in got:
                assert s.session_id and s.created and s.modified
                assert all(c.kind in ("user", "assistant", "tool", "thinking", "summary", "custom", "context")
                           for c in s.chunks)
            sessions += len(got)
            text = "\n".join(c.text for s in got for c in s.chunks if c.kind in ("user", "tool"))
            assert text, "no user prompt or tool call indexed from %s" % f
    assert sessions >= 1


# ==================================================================================================
# The parser contract: what every registered parser must do (see the Parser docstring)
# ==================================================================================================

CT_T = "2026-05-01T10:00:0%dZ"
CT_MS = 1777629600000   # 2026-05-01T10:00:00Z in ms


def ct_jsonl(name, records, unknown, extra):
    """A list of records -> a JSONL file under the test's folder, `extra(unknown)` appended when asked."""
    return lambda d: write_jsonl(d / name, records + ([extra(unknown)] if unknown else []))


def ct_db(build, add):
    """A store built by an agent's helper above, with `add(con, unknown)` run on it when asked."""
    def write(d, unknown, name):
        path = build(d / name)
        if unknown:
            con = sqlite3.connect(str(path))
            add(con, unknown)
            con.commit()
            con.close()
        return path
    return write


def ct_pi(d, unknown, agent="pi"):
    lines = [{"type": "session", "version": 3, "id": "ct-" + agent, "timestamp": CT_T % 0, "cwd": "/w"},
             {"type": "message", "id": "1", "parentId": None, "timestamp": CT_T % 1,
              "message": {"role": "user", "content": [{"type": "text", "text": "the walrus question"}]}},
             {"type": "message", "id": "2", "parentId": "1", "timestamp": CT_T % 2,
              "message": {"role": "assistant", "content": [{"type": "text", "text": "the walrus answer"}]}}]
    return ct_jsonl(agent + ".jsonl", lines, unknown, lambda u: {"type": u, "id": "3", "parentId": "2",
                                                               "timestamp": CT_T % 3})(d)


def ct_claude(d, unknown):
    rec = lambda rtype, n, **kw: dict({"type": rtype, "uuid": "u%d" % n, "sessionId": cc_SID, "cwd": "/w",
                                       "timestamp": CT_T % n, "version": "2.1.14"}, **kw)
    return ct_jsonl(cc_SID + ".jsonl", [
        rec("user", 1, message={"role": "user", "content": "the walrus question"}),
        rec("assistant", 2, message={"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "an answer"}]}),
    ], unknown, lambda u: rec(u, 3, data={}))(d)


def ct_codex(d, unknown):
    item = lambda n, rtype, payload: {"timestamp": CT_T % n, "type": rtype, "payload": payload}
    return ct_jsonl("rollout-2026-05-01T10-00-00-%s.jsonl" % cc_TID, [
        item(0, "session_meta", {"id": cc_TID, "timestamp": CT_T % 0, "cwd": "/w", "cli_version": "0.169.0"}),
        item(1, "response_item", {"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "the walrus question"}]}),
        item(2, "response_item", {"type": "message", "role": "assistant",
                                  "content": [{"type": "output_text", "text": "an answer"}]}),
        item(2, "token_usage_record", {"thread_id": cc_TID, "usage": {"input_tokens": 50}}),   # (0.169, recorded)
    ], unknown, lambda u: item(3, u, {"data": 1}))(d)


def ct_gemini(d, unknown):
    return ct_jsonl("session-2026-05-01T10-00-g1.jsonl", [
        {"sessionId": "g-1", "projectHash": "ab", "startTime": CT_T % 0, "lastUpdated": CT_T % 2, "kind": "main"},
        {"id": "u1", "timestamp": CT_T % 1, "type": "user", "content": [{"text": "the walrus question"}]},
        {"id": "a1", "timestamp": CT_T % 2, "type": "gemini", "content": "an answer"},
    ], unknown, lambda u: {"id": "x1", "timestamp": CT_T % 3, "type": u, "content": "?"})(d)


def ct_cursor(d, unknown):
    return ct_jsonl("c1.jsonl", [
        ogc_cursor_line("user", {"type": "text", "text": "<user_query>\nthe walrus question\n</user_query>"}),
        ogc_cursor_line("assistant", {"type": "text", "text": "an answer"}),
    ], unknown, lambda u: {"type": u})(d)


def ct_aider(d, unknown):
    path = d / ".aider.chat.history.md"
    path.write_text("\n# aider chat started at 2026-05-01 10:00:00\n\n#### the walrus question\n\nan answer\n")
    return path


def ct_cline(d, unknown):
    rows = [{"ts": CT_MS + 1000, "type": "say", "say": "task", "text": "the walrus question"},
            {"ts": CT_MS + 2000, "type": "say", "say": "text", "text": "an answer"}]
    if unknown:
        rows.append({"ts": CT_MS + 3000, "type": "say", "say": unknown, "text": "?"})
    return write_file(d / "task1" / "ui_messages.json", json.dumps(rows))


def ct_copilot(d, unknown):
    ev = lambda n, etype, data: {"type": etype, "data": data, "id": "e%d" % n, "timestamp": CT_T % n, "parentId": None}
    return ct_jsonl("events.jsonl", [
        ev(0, "session.start", {"sessionId": "sid-1", "copilotVersion": "1.0.11", "startTime": CT_T % 0,
                                "context": {"cwd": "/w"}}),
        ev(1, "user.message", {"content": "the walrus question"}),
        ev(2, "assistant.message", {"content": "an answer", "toolRequests": []}),
    ], unknown, lambda u: ev(3, u, {}))(d)


def ct_amp(d, unknown):
    content = [{"type": "text", "text": "an answer"}] + ([{"type": unknown}] if unknown else [])
    return write_file(d / "T-1.json", json.dumps({"v": 1, "id": "T-1", "title": "Walrus", "created": CT_MS, "messages": [
        {"role": "user", "messageId": 0, "content": [{"type": "text", "text": "the walrus question"}],
         "meta": {"sentAt": CT_MS + 1000}},
        {"role": "assistant", "messageId": 1, "content": content, "meta": {"sentAt": CT_MS + 2000}}]}))


def ct_goose(d, unknown):
    content = [{"type": "text", "text": "an answer"}] + ([{"type": unknown}] if unknown else [])
    return ct_jsonl("walrus.jsonl", [
        {"working_dir": "/w", "description": "Walrus", "message_count": 2},
        {"role": "user", "created": CT_MS // 1000 + 1, "content": [{"type": "text", "text": "the walrus question"}]},
        {"role": "assistant", "created": CT_MS // 1000 + 2, "content": content},
    ], None, None)(d)


def ct_droid(d, unknown):
    return ct_jsonl("d1.jsonl", [
        {"type": "session_start", "id": "d1", "title": "Walrus", "cwd": "/w", "version": "0.81.0"},
        {"type": "message", "id": "m1", "timestamp": CT_T % 1,
         "message": {"role": "user", "content": [{"type": "text", "text": "the walrus question"}]}},
        {"type": "message", "id": "m2", "timestamp": CT_T % 2,
         "message": {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]}},
    ], unknown, lambda u: {"type": u, "id": "m3", "timestamp": CT_T % 3})(d)


def ct_qwen(d, unknown):
    return ct_jsonl(os.path.join("chats", ot_SID + ".jsonl"), [
        ot_q("u1", None, "user", message={"role": "user", "parts": [{"text": "the walrus question"}]}),
        ot_q("a2", "u1", "assistant", message={"role": "model", "parts": [{"text": "an answer"}]}),
    ], unknown, lambda u: ot_q("x3", "a2", u, message={"role": "model", "parts": []}))(d)


def ct_kimi(d, unknown):
    rows = [{"type": "context.append_message", "time": CT_MS + 1000, "message": {
                "role": "user", "content": [{"type": "text", "text": "the walrus question"}], "origin": {"kind": "user"}}},
            {"type": "context.append_loop_event", "time": CT_MS + 2000, "event": {
                "type": "content.part", "stepUuid": "s1", "part": {"type": "text", "text": "an answer"}}}]
    return ot_kimi_wire(d, "main", rows + ([{"type": unknown, "time": CT_MS + 3000}] if unknown else []))


def ct_grok(d, unknown):
    return ct_jsonl(os.path.join("bucket", "s1", "chat_history.jsonl"), [
        {"type": "user", "content": [{"type": "text", "text": "the walrus question"}]},
        {"type": "assistant", "content": "an answer"},
    ], unknown, lambda u: {"type": u})(d)


def ct_hermes(d, unknown):
    messages = [{"role": "user", "content": "the walrus question"}, {"role": "assistant", "content": "an answer"}]
    return write_file(d / "session_1.json", json.dumps({
        "session_id": "h1", "session_start": CT_T % 0, "last_updated": CT_T % 2, "cwd": "/w",
        "messages": messages + ([{"role": unknown, "content": "?"}] if unknown else [])}))


def ct_antigravity(d, unknown):
    step = lambda n, stype, src, content: {"step_index": n, "source": src, "type": stype, "created_at": CT_T % n,
                                           "content": content}
    return ct_jsonl(os.path.join("conv-1", ".system_generated", "logs", "transcript.jsonl"), [
        step(0, "USER_INPUT", "USER_EXPLICIT", "<USER_REQUEST>the walrus question</USER_REQUEST>"),
        step(1, "PLANNER_RESPONSE", "MODEL", "an answer"),
    ], unknown, lambda u: step(2, u, "SYSTEM", ""))(d)


def ct_continue(d, unknown):
    history = [{"message": {"role": "user", "content": "the walrus question"}, "contextItems": []},
               {"message": {"role": "assistant", "content": "an answer"}, "contextItems": []}]
    if unknown:
        history.append({"message": {"role": unknown, "content": "x"}, "contextItems": []})
    return write_file(d / "c-1.json", {"sessionId": "c-1", "title": "Walrus", "workspaceDirectory": "/w",
                                       "history": history})


def ct_copilot_chat(d, unknown):
    response = [{"value": "an answer"}] + ([{"kind": unknown}] if unknown else [])
    return write_file(d / "chatSessions" / "v-1.json", {"version": 3, "sessionId": "v-1", "creationDate": CT_MS,
                                                        "requests": [{"requestId": "r1", "timestamp": CT_MS + 1000,
                                                                      "message": {"text": "the walrus question"},
                                                                      "response": response}]})


def ct_zed(d, unknown):
    messages = [{"User": {"id": "u", "content": [{"Text": "the walrus question"}]}},
                {"Agent": {"content": [{"Text": "an answer"}], "tool_results": {}}}] + ([{unknown: {}}] if unknown else [])
    return zed_store(d / "threads.db", [("z-1", "json", json.dumps({"version": "0.3.0", "title": "Walrus",
                                                                   "updated_at": CT_T % 2, "messages": messages}),
                                         None, "/w")])


def ct_vibe(d, unknown):
    write_file(d / "session_1" / "meta.json", {"session_id": "vb-1", "start_time": CT_T % 0, "working_dir": "/w"})
    return ct_jsonl("session_1/messages.jsonl", [{"role": "user", "content": "the walrus question"},
                                                 {"role": "assistant", "content": "an answer"}],
                    unknown, lambda u: {"role": u, "content": "x"})(d)


def ct_openhands(d, unknown):
    write_file(d / "oh" / "base_state.json", {"id": "oh-1", "workspace": {"working_dir": "/w"}})
    events = [{"kind": "MessageEvent", "timestamp": CT_T % 1, "source": "user",
               "llm_message": {"role": "user", "content": [{"type": "text", "text": "the walrus question"}]}},
              {"kind": "MessageEvent", "timestamp": CT_T % 2, "source": "agent",
               "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]}}]
    for i, ev in enumerate(events + ([{"kind": unknown, "timestamp": CT_T % 3}] if unknown else [])):
        write_file(d / "oh" / "events" / ("event-%05d-x.json" % i), ev)
    return d / "oh" / "base_state.json"


def ct_kiro(d, unknown):
    write_file(d / "k-1.json", {"session_id": "k-1", "cwd": "/w", "created_at": CT_T % 0, "updated_at": CT_T % 2})
    return ct_jsonl("k-1.jsonl", [{"kind": "Prompt", "data": {"content": [{"kind": "text", "data": "the walrus question"}]}},
                                  {"kind": "AssistantMessage", "data": {"content": [{"kind": "text", "data": "an answer"}]}}],
                    unknown, lambda u: {"kind": u, "data": {}})(d)


def ct_warp(d, unknown):
    import sqlite3
    path = d / "warp.sqlite"
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE ai_queries (exchange_id TEXT, conversation_id TEXT, start_ts TEXT, input TEXT, "
                "working_directory TEXT)")
    con.execute("INSERT INTO ai_queries VALUES ('e1', 'w-1', '2026-05-01 10:00:01', ?, '/w')",
                (json.dumps([{"Query": {"text": "the walrus question"}}]),))
    con.commit()
    con.close()
    return path


def ct_devin(d, unknown):
    import sqlite3
    path = d / "sessions.db"
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE sessions (id TEXT, title TEXT, working_directory TEXT, created_at INTEGER, "
                "last_activity_at INTEGER, hidden INTEGER)")
    con.execute("CREATE TABLE message_nodes (session_id TEXT, chat_message TEXT, created_at INTEGER)")
    con.execute("INSERT INTO sessions VALUES ('dv-1', 'Walrus', '/w', ?, ?, 0)", (CT_MS // 1000, CT_MS // 1000 + 2))
    for i, m in enumerate([{"role": "user", "content": "the walrus question"}, {"role": "assistant", "content": "an answer"}]
                          + ([{"role": unknown, "content": "x"}] if unknown else [])):
        con.execute("INSERT INTO message_nodes VALUES ('dv-1', ?, ?)", (json.dumps(m), CT_MS // 1000 + i))
    con.commit()
    con.close()
    return path


def ct_omo(d, unknown):
    return ct_jsonl("ses_walrus.jsonl", [{"type": "user", "timestamp": CT_T % 1, "content": "the walrus question"},
                                         {"type": "tool_use", "timestamp": CT_T % 2, "tool_name": "bash",
                                          "tool_input": {"command": "ls"}}],
                    unknown, lambda u: {"type": u, "timestamp": CT_T % 3})(d)


def ct_windsurf(d, unknown):
    return write_file(d / "cascade" / "c-1.pb", "\x08\x96\x01 encrypted")


def ct_specstory(d, unknown):
    return write_file(d / "proj" / ".specstory" / "history" / "2026-05-01_10-00-00Z-walrus.md",
                      "<!-- Generated by SpecStory -->\n\n# Walrus (2026-05-01 10:00:00Z)\n\n"
                      "_**User**_\n\nthe walrus question\n\n---\n\n_**Assistant**_\n\nan answer\n\n---\n")

def ct_add_part(con, unknown):   # OpenCode's and Kilo's schema: one more part of the first message
    mid, sid = con.execute("SELECT id, session_id FROM message ORDER BY rowid LIMIT 1").fetchone()
    con.execute("INSERT INTO part VALUES (?,?,?,?,?,?)", ("prt_x", mid, sid, 0, 0, json.dumps({"type": unknown})))


# One small file of each agent's format, and how to put one record (or content block) of a type the
# agent never wrote into it. Agent id -> writer(folder, unknown type or None) -> path.
CONTRACT_FILES = {
    "pi": ct_pi, "claude": ct_claude, "codex": ct_codex, "gemini": ct_gemini, "cursor": ct_cursor,
    "aider": ct_aider, "cline": ct_cline, "copilot": ct_copilot, "amp": ct_amp, "goose": ct_goose,
    "droid": ct_droid, "qwen": ct_qwen, "kimi": ct_kimi, "grok": ct_grok, "hermes": ct_hermes,
    "antigravity": ct_antigravity, "openclaw": lambda d, u: ct_pi(d, u, agent="openclaw"),
    "opencode": lambda d, u: ct_db(ogc_opencode_db, ct_add_part)(d, u, "opencode.db"),
    "kilo": lambda d, u: ct_db(am_kilo_db, ct_add_part)(d, u, "kilo.db"),
    "crush": lambda d, u: ct_db(am_crush_db, lambda con, u: con.execute(
        "INSERT INTO messages VALUES('mx','s1','assistant',?,'m',1754062400,1754062400,NULL,'p',0)",
        (json.dumps([{"type": u, "data": {}}]),)))(d, u, "crush.db"),
    "omp": lambda d, u: ct_pi(d, u, agent="omp"), "openclaude": ct_claude, "claude-desktop": ct_claude,
    "traex": ct_codex, "continue": ct_continue, "copilot-chat": ct_copilot_chat, "zed": ct_zed, "vibe": ct_vibe,
    "openhands": ct_openhands, "kiro": ct_kiro, "warp": ct_warp, "devin": ct_devin, "windsurf": ct_windsurf,
    "specstory": ct_specstory, "omo": ct_omo,
    "kiro-ide": lambda d, u: ct_continue(d / "workspace-sessions" / "ws", u),
    "deepseek-harness": lambda d, u: write_jsonl(d / "session.jsonl", dsh_log(u)),
    "trae": lambda d, u: trae_db(d / "state.vscdb", [{"sessionId": "tr-1", "createdAt": CT_MS, "messages": [
        {"role": "user", "content": "the walrus question", "timestamp": CT_MS + 1000},
        {"role": "assistant", "content": "an answer", "timestamp": CT_MS + 2000}]
        + ([{"role": u, "content": "x", "timestamp": CT_MS + 3000}] if u else [])}]),
}
# Formats that are one another's: OpenClaw and omp write pi's, Kilo CLI writes OpenCode's store,
# OpenClaude and Claude Desktop's agent mode write Claude Code's transcripts, TraeX Codex's rollouts.
CT_SAME_FORMAT = [{"pi", "openclaw"}, {"pi", "omp"}, {"openclaw", "omp"}, {"opencode", "kilo"},
                  {"claude", "openclaude"}, {"claude", "claude-desktop"}, {"openclaude", "claude-desktop"},
                  {"codex", "traex"}, {"claude", "omo"}, {"openclaude", "omo"}, {"claude-desktop", "omo"},
                  # Cursor's transcripts and Vibe's messages are both OpenAI-style {role, content} lines:
                  # told apart by where they are kept (agent-transcripts/, session_*/messages.jsonl)
                  {"cursor", "vibe"},
                  # oh-my-opencode's transcripts and Grok's chat_history are both {type: user, content}
                  # lines: told apart by where they are kept (~/.claude/transcripts/ses_*, ~/.grok/sessions)
                  {"grok", "omo"},
                  # the Kiro IDE's agent is Continue's: its workspace sessions are Continue's session files
                  {"continue", "kiro-ide"}]
# Parsers that read nothing by design: they list files an agent keeps unreadable (encrypted) so that
# `status` says why they are not indexed.
CT_UNREADABLE = {"windsurf"}
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\Z")


def ct_write(agent, tmp_path, unknown=None):
    folder = tmp_path / agent
    folder.mkdir(parents=True, exist_ok=True)
    return str(CONTRACT_FILES[agent](folder, unknown))


def test_every_registered_parser_has_a_contract_fixture():
    assert sorted(CONTRACT_FILES) == sorted(PARSERS)


@pytest.mark.parametrize("agent", list(PARSERS))
def test_parser_contract_docstring_declarations_kinds_and_utc_times(agent, tmp_path):
    parser = PARSERS[agent]
    assert (type(parser).__doc__ or "").strip() and parser.label and parser.id == agent
    assert isinstance(parser.records, (tuple, frozenset)), "%s does not declare its record types" % agent
    for declared in (parser.skipped_records, parser.blocks, parser.skipped_blocks):
        assert isinstance(declared, (tuple, frozenset))
    report = ParseReport()
    if agent in CT_UNREADABLE:
        with pytest.raises(NotASessionFile):
            parser.parse(ct_write(agent, tmp_path), report)
        return
    sessions = parser.parse(ct_write(agent, tmp_path), report)
    assert any(c.kind == "user" for s in sessions for c in s.chunks)
    assert report.unknown == {} and report.skipped == {}
    folders = [os.path.join(SAMPLES, f) for f, (a, _) in SAMPLE_AGENTS.items() if a == agent]   # when present
    for path in [os.path.join(d, f) for folder in folders for d, _, files in os.walk(folder) for f in files]:
        try:
            sessions += parser.parse(path, ParseReport())
        except NotASessionFile:
            continue
    for s in sessions:
        assert all(c.kind in sesame.KIND_COLUMN for c in s.chunks)
        times = [s.created, s.modified] + [c.ts for c in s.chunks if c.ts]
        assert all(isinstance(t, str) and ISO_UTC.match(t) for t in times), (s.path, times)


@pytest.mark.parametrize("agent", list(PARSERS))
def test_parser_contract_a_record_type_the_agent_never_wrote_is_counted_as_drift(agent, tmp_path):
    parser = PARSERS[agent]
    if getattr(parser, "records", None) == ():
        pytest.skip("%s's format has no typed records" % agent)
    report = ParseReport()
    sessions = parser.parse(ct_write(agent, tmp_path, "hologram_beam"), report)
    assert any(c.kind == "user" for s in sessions for c in s.chunks)   # the rest is still read
    assert [k for k in report.unknown if k.endswith("hologram_beam")] and sum(report.unknown.values()) == 1


def test_parser_contract_the_versions_records_name_are_noted(tmp_path):
    with_versions = {"claude": "2.1.14", "codex": "0.169.0", "copilot": "1.0.11", "qwen": "0.21.13", "kilo": "7.7.9",
                     "droid": "0.81.0", "opencode": "1.2.0"}
    for agent, version in with_versions.items():
        report = ParseReport()
        PARSERS[agent].parse(ct_write(agent, tmp_path), report)
        assert report.versions == {version}, agent


@pytest.mark.parametrize("agent", list(PARSERS))
def test_parser_contract_another_agents_file_is_refused_without_a_crash(agent, tmp_path):
    parser = PARSERS[agent]
    for other in CONTRACT_FILES:
        if other == agent or {agent, other} in CT_SAME_FORMAT:
            continue
        path = ct_write(other, tmp_path)
        try:
            sessions = parser.parse(path, ParseReport())
        except NotASessionFile:
            continue
        assert not [c for s in sessions for c in s.chunks], "%s read %s's file" % (agent, other)


# Values of a type the parser did not expect: an object where an id was, a number where a list of
# tool calls or an output was (a new release, a hand-edited file, a broken writer).
ODD_VALUES = [None, 7, 2.5, True, "", "x", [], [None], {}, {"type": None}]


def ct_odd_places(path):
    """(records, whether JSONL, [(record index, place of a value in it)]) of a JSON or JSONL file;
    None for another kind of file (a database, Markdown)."""
    raw = open(path, "rb").read()
    try:
        docs, jsonl = [json.loads(raw)], False
    except ValueError:
        try:
            docs, jsonl = [json.loads(l) for l in raw.splitlines() if l.strip()], True
        except ValueError:
            return None

    def places(v, at=()):
        yield at
        for k, x in (v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()):
            yield from places(x, at + (k,))

    return docs, jsonl, [(i, at) for i, doc in enumerate(docs) for at in list(places(doc))[1:]]


def ct_odd_text(docs, jsonl, i, at, odd):
    """The file's text with the value at record i, place `at`, replaced by `odd`."""
    copy = json.loads(json.dumps(docs[i]))
    holder = copy
    for k in at[:-1]:
        holder = holder[k]
    holder[at[-1]] = odd
    out = docs[:i] + [copy] + docs[i + 1:]
    return "".join(json.dumps(d) + "\n" for d in out) if jsonl else json.dumps(copy)


def ct_parse_odd(parser, path, text):
    """Parse `text` written at `path`: sessions, or None when refused as not a session file. Anything
    else raised is the failure these tests look for (parse_file would report the whole file failed)."""
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(text)
    try:
        sessions = parser.parse(path, ParseReport())
    except NotASessionFile:
        return None
    for sess in sessions:
        sesame.Prepared(sess, fresh=True)   # redaction and the ranking documents take what it gave
    return sessions


@pytest.mark.parametrize("agent", list(PARSERS))
def test_parser_contract_a_value_of_an_unexpected_type_never_fails_the_file(agent, tmp_path):
    parser = PARSERS[agent]
    path = ct_write(agent, tmp_path)
    found = ct_odd_places(path)
    if found is None:
        pytest.skip("%s's contract file is not JSON" % agent)
    docs, jsonl, places = found
    for i, at in places:   # every value of the file in turn (each value, object and list)
        for odd in ODD_VALUES:
            try:
                ct_parse_odd(parser, path, ct_odd_text(docs, jsonl, i, at, odd))
            except Exception as e:
                pytest.fail("%s: %r at %s: %s: %s" % (agent, odd, "/".join(map(str, at)), type(e).__name__, e))


def test_tool_call_ids_and_lists_of_an_unexpected_type_cost_only_that_call(tmp_path):
    """Call ids are keys that join a call to its result: an object or a list there used to raise
    (unhashable) and the whole file was reported failed, its sessions not indexed."""
    w = PiWriter(tmp_path / "pi", "odd-pi")
    w.user("the gearbox calibration drifts")
    w.assistant(calls=[({"id": 1}, "bash", {"command": "make calibrate"})])
    w.result(["c", 1], "bash", "calibration done")
    w.entry("message", message={"role": "bashExecution", "command": "date", "output": 42.5})
    w.assistant("calibrated the sprocket tension")
    [s] = parse_file("pi", w.save())
    assert texts(s, "user") == ["the gearbox calibration drifts"] and texts(s, "assistant") == ["calibrated the sprocket tension"]
    tools = texts(s, "tool")
    assert any("make calibrate" in t for t in tools) and any("calibration done" in t for t in tools)
    assert any("42.5" in t for t in tools)   # an output that is a number is kept as written

    p = write_jsonl(tmp_path / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "why does the sprocket slip"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "msg_1", [{"type": "tool_use", "id": ["toolu", 1], "name": "Bash",
                                                          "input": {"command": "grep sprocket"}}]),
        cc_cl_user("u2", "2026-01-01T00:00:02Z", [{"type": "tool_result", "tool_use_id": ["toolu", 1],
                                                 "content": "sprocket.c: slip"}]),
        cc_cl_asst("a2", "2026-01-01T00:00:03Z", "msg_2", [{"type": "text", "text": "the sprocket teeth are worn"}]),
    ])
    [s] = parse_file("claude", p)
    assert texts(s, "user") == ["why does the sprocket slip"] and texts(s, "assistant") == ["the sprocket teeth are worn"]
    assert any("grep sprocket" in t and "sprocket.c: slip" in t for t in texts(s, "tool"))

    p = write_jsonl(cc_rollout(tmp_path), [
        cc_cx_meta(),
        cc_cx_msg("2025-11-17T21:30:30.000Z", "user", "tune the flywheel governor"),
        cc_cx("2025-11-17T21:30:32.000Z", "response_item", {"type": "function_call", "name": "shell",
                                                          "call_id": {"odd": True}, "arguments": "{}"}),
        cc_cx("2025-11-17T21:30:33.000Z", "response_item", {"type": "function_call_output", "call_id": {"odd": True},
                                                          "output": "governor tuned"}),
        cc_cx("2025-11-17T21:30:33.500Z", "event_msg", {"type": "exec_command_end", "call_id": [1], "exit_code": 1}),
        cc_cx_msg("2025-11-17T21:30:34.000Z", "assistant", "the flywheel governor is tuned"),
    ])
    [s] = parse_file("codex", p)
    assert texts(s, "user") == ["tune the flywheel governor"] and texts(s, "assistant") == ["the flywheel governor is tuned"]
    assert any("governor tuned" in t for t in texts(s, "tool"))


@pytest.mark.skipif(not os.path.isdir(SAMPLES), reason="../shared/samples not present")
@slow
def test_real_samples_with_values_of_an_unexpected_type_never_fail_the_file(tmp_path):
    """The contract point above over the real sample files (with their tool calls, attachments and
    nested records), each with a fixed random share of its values replaced."""
    rnd = random.Random(20261126)
    failures, tried = [], 0
    for folder, (agent, _) in sorted(SAMPLE_AGENTS.items()):
        for src in sorted(glob.glob(os.path.join(SAMPLES, folder, "**", "*"), recursive=True)):
            if not os.path.isfile(src) or os.path.getsize(src) > 300_000:
                continue
            found = ct_odd_places(src)
            if found is None:
                continue
            docs, jsonl, places = found
            path = str(tmp_path / os.path.relpath(src, SAMPLES))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            for i, at in rnd.sample(places, min(40, len(places))):
                odd = rnd.choice(ODD_VALUES)
                tried += 1
                try:
                    ct_parse_odd(PARSERS[agent], path, ct_odd_text(docs, jsonl, i, at, odd))
                except Exception as e:
                    failures.append((os.path.relpath(src, SAMPLES), odd, "/".join(map(str, at)), "%s: %s" % (type(e).__name__, e)))
    assert tried > 200 and failures == []


DEEP = "[" * 100000   # deeper than Python's recursion limit: json raises RecursionError, not ValueError


def ct_deep(agent, d):
    """A file of `agent`'s format whose one value holds JSON nested too deep to decode."""
    if agent == "codex":
        path = ct_codex(d, None)
        with open(path, "a") as f:
            f.write(line({"timestamp": CT_T % 4, "type": "response_item", "payload": {
                "type": "function_call", "name": "shell", "call_id": "c1", "arguments": DEEP}}))
            f.write(line({"timestamp": CT_T % 5, "type": "response_item", "payload": {
                "type": "function_call", "name": "apply_patch", "call_id": "c2", "arguments": "{" + DEEP}}))
        return path
    if agent == "qwen":
        path = ct_qwen(d, None)
        with open(path, "a") as f:
            f.write(DEEP + "\n")
        return path
    if agent == "kimi":   # the second line tells kimi-cli's wire from Kimi Code's
        return ot_kimi_wire(d, "main", [DEEP[:60000], {"type": "context.append_message", "time": CT_MS, "message": {
            "role": "user", "content": [{"type": "text", "text": "the walrus question"}], "origin": {"kind": "user"}}}])
    messages = [{"role": "user", "content": "the walrus question"},
                {"role": "tool", "tool_call_id": "t1", "content": '{"exit_code": 1, "output": ' + DEEP}]
    return write_file(d / "session_1.json", json.dumps({"session_id": "h1", "session_start": CT_T % 0,
                                                        "messages": messages}))


@pytest.mark.parametrize("agent", ["codex", "qwen", "kimi", "hermes"])
def test_a_value_nested_too_deep_to_decode_costs_only_itself_not_the_file(agent, tmp_path):
    sessions = PARSERS[agent].parse(str(ct_deep(agent, tmp_path)), ParseReport())
    assert [c for s in sessions for c in s.chunks if c.kind == "user" and "walrus" in c.text]


def test_a_chunk_of_a_kind_that_does_not_exist_is_refused():
    s = sesame.Session("pi", "s", "/x")
    s.add("assistant", "fine")
    with pytest.raises(ValueError):
        s.add("asistant", "a typo would file this text in no column")
    assert [c.kind for c in s.chunks] == ["assistant"]


def readme_sources_table():
    """The README's agent table: parser id -> its row's cells by column title."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Sources\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in section.splitlines() if l.startswith("|")]
    head, body = rows[0], [r for r in rows[2:]]
    return {r[head.index("id")].strip("`"): dict(zip(head, r)) for r in body}


def test_the_readme_sources_table_has_a_row_per_parser_naming_the_release_it_was_verified_against():
    table = readme_sources_table()
    assert sorted(table) == sorted(PARSERS)
    column = next(c for c in next(iter(table.values())) if c.startswith("verified against"))
    assert {a: row[column] for a, row in table.items()} == {a: p.verified or "—" for a, p in PARSERS.items()}


# ==================================================================================================
# Agents together: one conversation in several layouts, discovery without config, the samples
# ==================================================================================================

def render_conversation(fmt, root, sid, cwd, turns, start="2026-05-01T10:00:00"):
    """Write one conversation [(user text, assistant text, [(command, output)])] in pi, Claude Code
    or Codex layout under an agent's home folder `root`; returns the file path."""
    clock = iter(range(10, 10000))

    def ts():
        return "%s.%03dZ" % (start, next(clock))
    if fmt == "pi":
        w = PiWriter(os.path.join(str(root), "sessions"), sid, cwd=cwd, start=start + ".000Z")
        for user, answer, calls in turns:
            w.user(user)
            for command, output in calls:
                w.tool("bash", {"command": command}, output)
            w.assistant(answer)
        return w.save()
    records = []
    if fmt == "claude":
        n = iter(range(1, 10000))

        def rec(rtype, message):
            records.append({"type": rtype, "uuid": "u%d" % next(n), "sessionId": sid, "cwd": cwd, "timestamp": ts(),
                            "isSidechain": False, "version": "2.1.14", "message": message})
        for user, answer, calls in turns:
            rec("user", {"role": "user", "content": user})
            for i, (command, output) in enumerate(calls):
                tid = "toolu_%d" % next(n)
                rec("assistant", {"id": "msg_%s" % tid, "role": "assistant",
                                  "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": command}}]})
                rec("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": output}]})
            rec("assistant", {"id": "msg_%d" % next(n), "role": "assistant", "content": [{"type": "text", "text": answer}]})
        path = os.path.join(str(root), "projects", "".join(c if c.isalnum() else "-" for c in cwd), sid + ".jsonl")
    else:
        records.append({"timestamp": ts(), "type": "session_meta",
                        "payload": {"id": sid, "timestamp": start + ".000Z", "cwd": cwd, "originator": "codex_cli_rs"}})
        for user, answer, calls in turns:
            records.append({"timestamp": ts(), "type": "response_item", "payload": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": user}]}})
            for i, (command, output) in enumerate(calls):
                cid = "call_%d_%d" % (len(records), i)
                records.append({"timestamp": ts(), "type": "response_item", "payload": {
                    "type": "function_call", "name": "shell", "call_id": cid,
                    "arguments": json.dumps({"command": ["bash", "-lc", command]})}})
                records.append({"timestamp": ts(), "type": "response_item", "payload": {
                    "type": "function_call_output", "call_id": cid, "output": output}})
            records.append({"timestamp": ts(), "type": "response_item", "payload": {
                "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}})
        day = start[:10].replace("-", "/")
        path = os.path.join(str(root), "sessions", day, "rollout-%s-%s.jsonl" % (start.replace(":", "-"), sid))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(line(r))
    return path


CONVERSATIONS = [
    ("0a0a0a0a-1111-4111-8111-000000000001", "/home/dev/api", [
        ("The payments webhook retries too fast and partners complain.",
         "Added exponential backoff with jitter to webhook retries.", [("pytest tests/test_webhooks.py", "5 passed")])]),
    ("0a0a0a0a-1111-4111-8111-000000000002", "/home/dev/web", [
        ("Dark mode colours are wrong in the settings page.", "Fixed the CSS variables for dark mode.", []),
        ("Also the toggle does not persist.", "Stored the theme in localStorage.", [("npm test", "ok theme persists")])]),
    ("0a0a0a0a-1111-4111-8111-000000000003", "/home/dev/infra", [
        ("Terraform plan fails with a state lock error.", "Another run held the lock; released it.",
         [("terraform force-unlock 1234", "Terraform state has been successfully unlocked!")])]),
    ("0a0a0a0a-1111-4111-8111-000000000004", "/home/dev/api", [
        ("Webhook payloads need a signature header.", "Signed payloads with HMAC SHA256.", [])]),
]

CROSS_QUERIES = ["webhook retries backoff", "dark mode toggle", "terraform lock", "webhook signature",
                 "force-unlock", "localStorage theme", "partners complain jitter"]


def test_the_same_conversations_rank_the_same_in_pi_claude_and_codex_layouts(tmp_path, monkeypatch, capsys, env):
    rankings = {}
    for fmt in ("pi", "claude", "codex"):
        home = tmp_path / fmt
        for sid, cwd, turns in CONVERSATIONS:
            render_conversation(fmt, home, sid, cwd, turns)
        sub = {"pi": "sessions", "claude": "projects", "codex": "sessions"}[fmt]
        write_config({"sources": [{"parser": fmt, "path": str(home / sub)}]}, tmp_path)
        monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / ("data-" + fmt)))
        rankings[fmt] = [search_ids(capsys, q) for q in CROSS_QUERIES]
        rankings[fmt].append(search_ids(capsys, "terraform", "--tool", "bash"))
    assert rankings["pi"] == rankings["claude"] == rankings["codex"]
    assert rankings["pi"][0][0].endswith("01") and rankings["pi"][2] == [CONVERSATIONS[2][0]]


def test_without_config_sessions_of_several_agents_in_their_default_places_are_found(tmp_path, env, capsys):
    os.remove(tmp_path / "config" / "config.jsonc")
    home = tmp_path / "home"
    words = {"pi": "aardvark", "claude": "bandicoot", "codex": "capybara"}
    for n, (fmt, word) in enumerate(words.items()):
        root = {"pi": home / ".pi" / "agent", "claude": home / ".claude", "codex": home / ".codex"}[fmt]
        render_conversation(fmt, root, "0b0b0b0b-2222-4222-8222-00000000000%d" % n, "/home/dev/zoo",
                            [("Tell me about the %s." % word, "The %s is an animal." % word, [])])
    gemini = home / ".gemini" / "tmp" / "zoo" / "chats"
    gemini.mkdir(parents=True)
    with open(gemini / "session-2026-05-01T10-00-g9.jsonl", "w") as f:
        f.write(line({"sessionId": "g-9", "projectHash": "ab", "startTime": "2026-05-01T10:00:00.000Z",
                      "lastUpdated": "2026-05-01T10:00:05.000Z", "kind": "main"}))
        f.write(line({"id": "u1", "timestamp": "2026-05-01T10:00:01Z", "type": "user", "content": [{"text": "and the dugong?"}]}))
        f.write(line({"id": "a1", "timestamp": "2026-05-01T10:00:02Z", "type": "gemini", "content": "A dugong swims."}))
    words["gemini"] = "dugong"
    for agent, word in words.items():
        code, out, err = run(capsys, "search", word, "--json")
        results = json.loads(out)["results"]
        assert [r["agent"] for r in results] == [agent], (agent, err)
    code, out, _ = run(capsys, "sources", "--json")
    active = {s["agent"] for s in json.loads(out)["sources"] if s["active"]}
    assert {"pi", "claude", "codex", "gemini"} <= active


def test_sources_counts_the_files_found_per_agent_and_why_some_were_not_indexed(env, capsys):
    PiWriter(env, "aaaa0001-one").user("the first session").save()
    PiWriter(env, "aaaa0002-two").user("the second session").save()
    with open(os.path.join(str(env), "notes.jsonl"), "w") as f:
        f.write("this is not a session\n")
    run(capsys, "index")
    pi = next(s for s in json.loads(run(capsys, "sources", "--json")[1])["sources"] if s["agent"] == "pi")
    assert (pi["filesFound"], pi["filesIndexed"], pi["filesNotIndexed"], pi["sessionsIndexed"]) == (3, 2, {"skipped": 1}, 2)
    code, out, _ = run(capsys, "sources")
    assert "3 files (1 not a session file)" in out and "sesame status" in out


@pytest.mark.parametrize("words", ["ocelot", "ocelot margay caracal"])   # (3 words: re-ranked first)
def test_a_session_removed_between_ranking_and_showing_is_left_out(env, capsys, monkeypatch, words):
    # Another process writes between a search's ranking and its results (an MCP server's background
    # refresh, `watch`, `forget`): a ranked session whose row is gone by then failed the whole search
    # ("'NoneType' object is not subscriptable"; found by a stress run of the MCP server).
    for sid in ("cat-a", "cat-b"):
        PiWriter(env, sid).user("the ocelot margay caracal notes of %s" % sid).save()
    assert run(capsys, "index")[0] == 0
    real = sesame.ranked_sessions

    def ranked_then_forgotten(*a, **kw):
        found = real(*a, **kw)
        r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "forget", "cat-a"],
                           env=dict(os.environ), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return found
    monkeypatch.setattr(sesame, "ranked_sessions", ranked_then_forgotten)
    code, out, err = run(capsys, "search", *words.split(), "--json", "--no-refresh")
    assert code == 0, err
    assert [r["sessionId"] for r in json.loads(out)["results"]] == ["cat-b"]


def test_forget_list_says_when_nothing_is_forgotten(env, capsys):
    code, out, _ = run(capsys, "forget", "--list")
    assert code == 0 and "No session is forgotten" in out
    assert json.loads(run(capsys, "forget", "--list", "--json")[1]) == {"forgotten": []}


SAMPLE_AGENTS = {  # samples folder -> (parser id, sessions its files hold)
    "aider": ("aider", 18), "antigravity": ("antigravity", 2), "claude-code": ("claude", 7), "codex": ("codex", 9),
    "copilot": ("copilot", 5), "crush": ("crush", 1), "cursor": ("cursor", 8), "factory-droid": ("droid", 6),
    "gemini": ("gemini", 4), "grok": ("grok", 2), "hermes": ("hermes", 3), "kimi": ("kimi", 3),
    "openclaw": ("openclaw", 3), "opencode": ("opencode", 3), "pi": ("pi", 5), "qwen": ("qwen", 5),
}
INJECTED = ("<environment_context>", "<system-reminder>", "<user_info>", "<command-name>", "# AGENTS.md",
            "Caveat: The messages below", "<local-command-stdout>", "<permissions instructions>")


@pytest.mark.skipif(not os.path.isdir(SAMPLES), reason="../shared/samples not present")
@slow
def test_every_sample_file_is_indexed_or_reported_and_its_prompts_and_commands_are_findable(tmp_path, env, capsys):
    sources = []
    for folder, (agent, _) in SAMPLE_AGENTS.items():
        for root, _, files in os.walk(os.path.join(SAMPLES, folder)):
            sources += [{"parser": agent, "path": os.path.join(root, f)} for f in files]
    write_config({"sources": sources}, tmp_path)
    code, out, err = run(capsys, "index", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["filesSeen"] == len(sources)
    assert all(p["reason"].startswith(("not a ", "not an ")) for p in summary["skipped"]), summary["skipped"]
    status = json.loads(run(capsys, "status", "--json")[1])
    assert {p["agent"]: p["sessions"] for p in status["perAgent"]} == {a: n for a, n in SAMPLE_AGENTS.values()}
    import sqlite3 as sq
    con = sq.connect(str(tmp_path / "data" / "index.sqlite"))
    rows = con.execute("SELECT s.agent, s.session_id, c.kind, c.text FROM chunks c JOIN sessions s ON s.id = c.session "
                       "ORDER BY s.id, c.seq").fetchall()
    missed, checked, injected = [], {}, []
    for agent, session_id, kind, text in rows:
        text = sesame.unpack(text)
        if kind == "user" and any(marker in text for marker in INJECTED):
            injected.append((agent, session_id, text[:80]))
        key = (agent, session_id, kind)
        if kind not in ("user", "tool") or key in checked:
            continue
        body = text.split("command:", 1)[1].split("\n")[0] if kind == "tool" and "command:" in text else text
        words = [w for w in re.findall(r"[^\W\d_]{4,}", body)][:5]
        if kind == "tool" and "command:" not in text or len(words) < 2:
            continue
        checked[key] = True
        flags = ["--tools"] if kind == "tool" else []
        code, out, _ = run(capsys, "search", " ".join(words), "--agent", agent, "--limit", "50", "--json",
                           "--max-chars", "0", "--no-refresh", *flags)
        if session_id not in [r["sessionId"] for r in json.loads(out)["results"]]:
            missed.append((agent, session_id, kind, words))
    assert injected == []
    assert missed == []
    assert set(assert_every_agent_exports(capsys, str(tmp_path / "data" / "index.sqlite"))) == \
        {a for a, n in SAMPLE_AGENTS.values() if n}
    assert {a for a, _, k in checked if k == "user"} >= {"claude", "codex", "pi", "aider", "gemini", "cursor", "qwen"}


# ==================================================================================================
# Real samples (../shared/samples), when present
# ==================================================================================================

needs_samples = pytest.mark.skipif(not os.path.isdir(SAMPLES), reason="../shared/samples not present")


@needs_samples
@slow
def test_every_pi_sample_user_message_is_findable(tmp_path, capsys, env):
    write_config({"sources": [{"parser": "pi", "path": os.path.join(SAMPLES, "pi")}]}, tmp_path)
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["sessions"] >= 4
    import re
    missed = []
    for root, _, files in os.walk(os.path.join(SAMPLES, "pi")):
        for f in files:
            path = os.path.join(root, f)
            (s,) = sesame.PARSERS["pi"].parse(path, sesame.ParseReport())
            for c in [c for c in s.chunks if c.kind == "user"][:25]:
                words = [w for w in re.findall(r"[A-Za-z]{5,}", c.text)][:4]
                if len(words) < 2:
                    continue
                code, out, _ = run(capsys, "search", " ".join(words), "--json", "--limit", "20", "--no-refresh")
                if s.session_id not in [r["sessionId"] for r in json.loads(out)["results"]]:
                    missed.append((f, words))
    assert missed == []


# ==================================================================================================
# Text analysis: the Python tokenizer and stemmer agree with SQLite's
# ==================================================================================================

def sqlite_terms(docs, tokenize):
    """What SQLite's FTS5 stores for each doc with the given tokenizer: [[term, ...], ...]."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize=%r)" % tokenize)
    con.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    con.executemany("INSERT INTO t(rowid, x) VALUES(?, ?)", list(enumerate(docs, 1)))
    out = [[] for _ in docs]
    for doc, term in con.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
        out[doc - 1].append(term)
    return out


def sample_words(limit=60000):
    words = {"caresses", "ponies", "ties", "caress", "cats", "feed", "agreed", "plastered", "bled", "motoring",
             "sing", "conflated", "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed", "failing",
             "filing", "happy", "sky", "relational", "conditional", "rational", "valenci", "hesitanci", "digitizer",
             "conformabli", "radicalli", "differentli", "vileli", "analogousli", "vietnamization", "predication",
             "operator", "feudalism", "decisiveness", "hopefulness", "callousness", "formaliti", "sensitiviti",
             "sensibiliti", "triplicate", "formative", "formalize", "electriciti", "electrical", "hopeful",
             "goodness", "revival", "allowance", "inference", "airliner", "gyroscopic", "adjustable", "defensible",
             "irritant", "replacement", "adjustment", "dependent", "adoption", "homologou", "communism", "activate",
             "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate", "cease", "controll", "roll",
             "aed", "eed", "ied", "oing", "yes", "s", "ss", "sss", "ies", "ying", "b" * 70, "x2y", "v20", "ed", "ing"}
    rnd = random.Random(3)
    for _ in range(3000):
        words.add("".join(rnd.choice("aeiouybcdlmnrstxz") for _ in range(rnd.randint(1, 12))))
    if os.path.isdir(SAMPLES):
        for path in glob.glob(os.path.join(SAMPLES, "**", "*"), recursive=True):
            if os.path.isfile(path) and len(words) < limit:
                with open(path, encoding="utf-8", errors="ignore") as f:
                    words.update(w.lower() for w in re.findall(r"[A-Za-z0-9]+", f.read(2000000)))
    return sorted(words)


def test_porter_stem_gives_what_fts5_stores_for_every_word():
    words = sample_words()
    want = sqlite_terms(words, "porter ascii")
    assert [w for w, (term,) in zip(words, want) if sesame.porter_stem(w) != term] == []


def test_tokens_are_what_unicode61_makes_of_text_in_many_scripts():
    docs = ["café naïve Ærøskøbing ΟΔΟΣ Σίσυφος İstanbul straße ﬁnance 東京タワー 😀emoji👍 a\u0301b e\u0301tude",
            "under_score kebab-case dot.ted v20 node-v20.1 ½ ² Ⅻ ١٢٣ привет мир йод ſ K \ue000private",
            "std::vector<int> OPS-306 parser.py ECONNREFUSED 127.0.0.1:5432 it's C++ $HOME ~/x/y.json"]
    # Known differences: letters added after Unicode 6.1 (SQLite's tables) and a letter with two accents.
    differ = {0x1E0, 0x1E1, 0x37F} | set(range(0x528, 0x530))
    docs += ["x%sy %s" % (chr(c), chr(c)) for c in list(range(0x80, 0x250)) + list(range(0x370, 0x530))
             if chr(c).isprintable() and c not in differ]
    assert [d for d, want in zip(docs, sqlite_terms(docs, "unicode61 remove_diacritics 2"))
            if sesame.fts_tokens(d) != want] == []


def test_terms_are_tokens_stemmed_as_the_index_stores_them():
    text = "Simplified the nix flake; tests were failing on node-v20 (parser.py)"
    assert sesame.fts_terms(text) == sqlite_terms([text], "porter unicode61 remove_diacritics 2")[0]


def test_the_first_look_for_cjk_letters_in_bytes_never_misses_one():
    """has_cjk looks at a text's UTF-8 bytes before its characters (for speed: emoji, ⚠️'s variation
    selector, Vietnamese and Latin-1 letters are not CJK, and cost a slow scan when taken for it). It
    must say what the exact pattern says, for every code point near the edges of CJK's ranges and of
    the bytes looked for, and a sample of all the others, alone, among ASCII, and after an emoji."""
    edges = set()
    for lo, hi in re.findall("(.)-(.)", sesame._CJK):
        edges |= {ord(lo) - 1, ord(lo), ord(hi), ord(hi) + 1}
    for lead in (0x1000, 0x1100, 0x1200, 0xE000, 0xF000, 0xF900, 0xFB00, 0xFF00, 0xFFC0, 0x10000, 0x1F000, 0x20000, 0x30000):
        edges |= {lead - 1, lead, lead + 1}
    points = sorted(edges | set(range(0x80, 0x110000, 97)))
    for cp in points:
        if 0 <= cp <= 0x10FFFF:
            for text in (chr(cp), "ab" + chr(cp) + "cd", "\U0001F916 ok " + chr(cp) + "\ufe0f"):
                assert sesame.has_cjk(text) == (sesame._CJK_CHAR.search(text) is not None), hex(cp)
    assert sesame.has_cjk("Tiếng Việt 🤖 ⚠️ straße “quoted”") is False
    assert sesame.has_cjk("⚠️ 用React写") and sesame.has_cjk("\U00020000") and sesame.has_cjk("한")


def test_every_cjk_letter_is_indexed_in_pairs_that_sqlite_keeps_whole():
    # A CJK run is given to FTS5 as its bigrams: a pair holding a character unicode61 takes for a
    # separator (a letter newer than its tables) would be cut, and the query's pair never found.
    letters = "".join(chr(c) for c in range(0x1100, 0x30000) if sesame._CJK_RUN.fullmatch(chr(c)))
    assert len(letters) > 80000
    text = "用React写 " + letters + " café"
    indexed = sesame.cjk_bigrams(text)
    want = ["用", "react", "写"] + [letters[i:i + 2] for i in range(len(letters) - 1)] + ["cafe"]
    assert sqlite_terms([indexed], "porter unicode61 remove_diacritics 2")[0] == want
    assert sesame.cjk_bigrams("plain English, naïve café") == "plain English, naïve café"


@pytest.mark.parametrize("word,parts", [
    ("handlePaymentIntentWebhook", ["handle", "payment", "intent", "webhook"]),
    ("HTTPServerError", ["http", "server", "error"]),
    ("getUserByID", ["get", "user", "by", "id"]),
    ("parseJSONResponse2", ["parse", "json", "response", "2"]),
    ("plainword", ["plainword"]),
])
def test_identifiers_split_into_their_words(word, parts):
    assert sesame.split_identifier(word) == parts


def test_identifier_parts_are_found_in_text_each_name_once():
    text = "call handlePaymentIntentWebhook() then handlePaymentIntentWebhook() and users_email_idx, not HTTP"
    assert sesame.identifier_parts(text).split(sesame.DOC_BREAK) == [
        "handle payment intent webhook", "handlepayment paymentintent intentwebhook"]
    assert sesame.identifier_parts("useState(getInitialColorScheme())").split(sesame.DOC_BREAK) == \
        ["use state", "get initial color scheme", "getinitial initialcolor colorscheme"]


# ==================================================================================================
# Index
# ==================================================================================================

def test_an_index_run_in_a_threaded_process_parses_in_process_without_forking(env, capsys, monkeypatch):
    # A server's background refresh runs in a thread: forking there can copy a lock another thread
    # holds into a worker that then waits for it forever.
    import multiprocessing
    for i in range(3):
        PiWriter(env, "thread-%d" % i).user("the numbat %d plan" % i).assistant("ok").save()
    monkeypatch.setattr(sesame, "PARALLEL_MIN_BYTES", 0)
    forks = []
    monkeypatch.setattr(multiprocessing, "get_context", lambda *a: forks.append(a) or pytest.fail("forked"))
    codes = []
    worker = threading.Thread(target=lambda: codes.append(sesame.main(["index"])))
    worker.start()
    worker.join(60)
    assert codes == [0] and not forks
    assert sorted(search_ids(capsys, "numbat", "--no-refresh")) == ["thread-0", "thread-1", "thread-2"]


def test_index_summary_counts_files_sessions_and_skipped_lines(env, capsys):
    PiWriter(env, "i-1").user("one").save(extra="garbage line\n")
    PiWriter(env, "i-2").user("two").save()
    code, out, err = run(capsys, "index", "--json")
    s = json.loads(out)
    assert (s["filesSeen"], s["filesIndexed"], s["sessions"], s["linesSkipped"]) == (2, 2, 2, 1)
    assert "2 files seen, 2 indexed" in err and "2 sessions" in err and "; 1 line skipped;" in err


def test_index_summary_files_indexed_unchanged_and_not_indexed_add_up_to_files_seen(env, capsys, monkeypatch):
    good_session(env)
    write_file(env / "--home-dev-notes--" / "notes.jsonl", "\n\n")                      # seen, not indexed
    locked = PiWriter(env, "locked", cwd="/home/dev/locked").user("hidden").save()
    _deny(monkeypatch, os.path.dirname(locked))                                          # a folder, not a file
    # A first run, then one where every file is unchanged (a file that is not a session file is
    # remembered as such: it is not read, nor reported, again).
    for indexed, unchanged, not_indexed in ((1, 0, 1), (0, 2, 0)):
        code, out, err = run(capsys, "index", "--json")
        s = json.loads(out)
        assert (s["filesSeen"], s["filesIndexed"], s["filesUnchanged"], s["filesSkipped"]) == (
            2, indexed, unchanged, not_indexed)
        assert s["foldersSkipped"] == 1 and len(s["skipped"]) == not_indexed + 1
        assert "2 files seen, %d indexed, %d unchanged, 0 removed, %d not indexed;" % (
            indexed, unchanged, not_indexed) in err and "; 1 folder not read" in err


def test_unchanged_files_are_not_read_again(corpus, capsys, monkeypatch):
    calls = []
    original = sesame.PiParser.parse
    monkeypatch.setattr(sesame.PiParser, "parse", lambda self, p, r: calls.append(p) or original(self, p, r))
    code, out, _ = run(capsys, "index", "--json")
    assert calls == [] and json.loads(out)["filesUnchanged"] == 10


def test_edited_file_is_reindexed_and_a_deleted_file_keeps_its_session_marked(corpus, capsys):
    assert search_ids(capsys, "carousel") == ["bbbb2222-carousel"]
    w = PiWriter(corpus, "bbbb2222-carousel", cwd="/home/dev/site", start="2026-02-01T10:00:00.000Z")
    w.user("Now a testimonial slider instead.").save()
    assert search_ids(capsys, "carousel") == []
    assert search_ids(capsys, "testimonial") == ["bbbb2222-carousel"]
    os.remove(w.path)
    code, out, _ = run(capsys, "index", "--json")
    assert json.loads(out)["filesRemoved"] == 1
    code, out, _ = run(capsys, "search", "testimonial", "--json")
    (r,) = json.loads(out)["results"]
    assert r["sessionId"] == "bbbb2222-carousel" and r["fileDeleted"] is True and r["resumeCommand"] is None
    code, out, _ = run(capsys, "search", "testimonial")
    assert "(file deleted)" in out
    code, out, _ = run(capsys, "show", "bbbb2222", "--json")
    shown = json.loads(out)
    assert shown["session"]["fileDeleted"] is True and shown["session"]["resumeCommand"] is None
    assert "testimonial slider" in shown["chunks"][0]["text"]
    code, out, _ = run(capsys, "show", "bbbb2222")
    assert "file deleted" in out and "testimonial slider" in out
    # A rebuild cannot read the file again: the kept session stays.
    run(capsys, "index", "--full")
    assert search_ids(capsys, "testimonial") == ["bbbb2222-carousel"]
    # `forget` removes a kept session for good.
    assert run(capsys, "forget", "bbbb2222")[0] == 0
    assert search_ids(capsys, "testimonial") == []


def test_ids_made_within_a_minute_get_a_longer_short_id_that_show_and_forget_accept(env, capsys):
    # UUIDv7 ids (pi 0.73, Codex 0.169): the first 8 characters are the creation time in minutes.
    a, b = "019a93b9-f380-7600-98ff-940e6b99603c", "019a93b9-f3c1-7a11-8e0d-2c4d1b0e6f11"
    PiWriter(env, a).user("the quokka import job").save()
    PiWriter(env, b).user("the quokka export job").save()
    PiWriter(env, "5e1f0c2a-0000-4000-8000-000000000001").user("the quokka audit").save()
    data = json.loads(run(capsys, "search", "quokka", "--json", "--fields", "minimal")[1])
    short = {r["sessionId"]: r["shortId"] for r in data["results"]}
    assert short[a] == "019a93b9-f38" and short[b] == "019a93b9-f3c"
    assert short["5e1f0c2a-0000-4000-8000-000000000001"] == "5e1f0c2a"
    code, out, _ = run(capsys, "search", "quokka import")
    assert "019a93b9-f38 " in out
    assert json.loads(run(capsys, "show", short[a], "--json")[1])["session"]["sessionId"] == a
    assert run(capsys, "show", "019a93b9")[0] == 1   # the 8-character prefix is ambiguous
    assert json.loads(run(capsys, "forget", short[b], "--json")[1])["forgotten"]["sessionId"] == b


def test_live_files_report_file_deleted_false(corpus, capsys):
    code, out, _ = run(capsys, "search", "carousel", "--json", "--fields", "minimal")
    assert json.loads(out)["results"][0]["fileDeleted"] is False


def test_the_session_an_agent_runs_in_is_marked_current_and_ranked_last(env, capsys, tmp_path, monkeypatch):
    # Claude Code 2.1 tells the commands it runs its session id (CLAUDE_CODE_SESSION_ID), Codex
    # 0.169 its thread id (CODEX_THREAD_ID). That session holds the query itself, many times.
    projects = tmp_path / "claude-projects"
    write_config({"sources": [{"parser": "claude", "path": str(projects)}]}, tmp_path)
    ids = {"own": "0c0c0c0c-0000-4000-8000-000000000001", "old": "0c0c0c0c-0000-4000-8000-000000000002"}
    for key, text in (("own", "search for the zephyr lattice session: sesame search zephyr lattice zephyr lattice"),
                      ("old", "the zephyr lattice failed to converge")):
        recs = [dict(cc_cl_user("u1", "2026-02-0%dT10:00:00.000Z" % (1 + len(key)), text), sessionId=ids[key])]
        write_jsonl(projects / "-home-u-proj" / (ids[key] + ".jsonl"), recs)
    assert search_ids(capsys, "zephyr lattice")[0] == ids["own"]     # outside the agent: BM25 alone
    monkeypatch.setenv("CLAUDE_CODE_SESSION_ID", ids["own"])
    data = json.loads(run(capsys, "search", "zephyr lattice", "--json")[1])
    assert [(r["sessionId"], r["current"]) for r in data["results"]] == [(ids["old"], False), (ids["own"], True)]
    code, out, _ = run(capsys, "search", "zephyr lattice")
    assert out.index("(this session)") > out.index("2.")


def test_a_moved_file_is_not_a_deletion_the_session_follows_it(corpus, capsys, tmp_path):
    path = [os.path.join(d, f) for d, _, fs in os.walk(corpus) for f in fs if "bbbb2222" in f][0]
    moved = os.path.join(str(corpus), "--home-dev-elsewhere--")
    os.makedirs(moved)
    shutil.move(path, os.path.join(moved, os.path.basename(path)))
    code, out, _ = run(capsys, "search", "carousel", "--json")
    (r,) = json.loads(out)["results"]
    assert r["fileDeleted"] is False and r["path"].startswith(moved)
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    assert con.execute("SELECT count(*) FROM sessions WHERE session_id='bbbb2222-carousel'").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM files WHERE status='deleted'").fetchone()[0] == 0


def test_keep_deleted_sessions_false_mirrors_deletions(corpus, capsys, tmp_path):
    write_config({"sources": [{"parser": "pi", "path": str(corpus)}], "keepDeletedSessions": False}, tmp_path)
    path = [os.path.join(d, f) for d, _, fs in os.walk(corpus) for f in fs if "bbbb2222" in f][0]
    os.remove(path)
    assert search_ids(capsys, "carousel") == []


def hermes_store(path, sessions):
    """A Hermes state.db holding {session id: [user prompts]} (the 0.1x schema)."""
    con = sqlite3.connect(str(path))
    con.executescript("""
        CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, source TEXT, model TEXT, model_config TEXT,
                               started_at REAL, ended_at REAL, title TEXT, parent_session_id TEXT);
        CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT,
                               tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL, reasoning TEXT);
        DELETE FROM sessions; DELETE FROM messages;
    """)
    for i, (sid, prompts) in enumerate(sorted(sessions.items())):
        con.execute("INSERT INTO sessions VALUES (?,'cli','m','{}',?,NULL,?,NULL)", (sid, 1777500000 + 1000 * i, sid))
        con.executemany("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?,'user',?,?)",
                        [(sid, text, 1777500001 + 1000 * i + k) for k, text in enumerate(prompts)])
    con.commit()
    con.close()


@pytest.mark.parametrize("keep", [True, False])
def test_a_session_an_agent_deletes_from_its_database_is_kept_like_a_deleted_file(env, capsys, tmp_path, keep):
    # Hermes prunes old sessions from state.db (sessions.auto_prune); OpenCode and Cursor delete
    # chats from theirs. The file stays, the session goes: the index keeps it, marked deleted.
    store = tmp_path / "hermes" / "state.db"
    store.parent.mkdir()
    write_config({"sources": [{"parser": "hermes", "path": str(store.parent)}], "keepDeletedSessions": keep}, tmp_path)
    hermes_store(store, {"h-old": ["the old walrus question"], "h-new": ["the new narwhal question"]})
    index_json(capsys)
    hermes_store(store, {"h-new": ["the new narwhal question", "and an orca"]})  # h-old pruned
    index_json(capsys)
    code, out, _ = run(capsys, "search", "walrus", "--json")
    found = [(r["sessionId"], r["fileDeleted"]) for r in json.loads(out)["results"]]
    assert found == ([("h-old", True)] if keep else []) and search_ids(capsys, "orca") == ["h-new"]
    hermes_store(store, {"h-new": ["the new narwhal question", "and an orca", "then a beluga"]})
    index_json(capsys)  # a later change to the store keeps it kept
    assert search_ids(capsys, "walrus") == (["h-old"] if keep else []) and search_ids(capsys, "beluga") == ["h-new"]
    hermes_store(store, {"h-old": ["the old walrus question"], "h-new": ["the new narwhal question"]})  # restored
    index_json(capsys)
    code, out, _ = run(capsys, "search", "walrus", "--json")
    assert [(r["sessionId"], r["fileDeleted"]) for r in json.loads(out)["results"]] == [("h-old", False)]
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    assert con.execute("SELECT count(*) FROM sessions WHERE session_id='h-old'").fetchone()[0] == 1


def test_a_new_parser_version_that_reads_fewer_sessions_from_a_file_is_followed(env, capsys, tmp_path, monkeypatch):
    # What a new parser version no longer calls a session (a stub, a sub-agent folded into its
    # parent) is not a session the agent deleted: it is not kept.
    store = tmp_path / "hermes" / "state.db"
    store.parent.mkdir()
    write_config({"sources": [{"parser": "hermes", "path": str(store.parent)}]}, tmp_path)
    hermes_store(store, {"h-old": ["the old walrus question"], "h-new": ["the new narwhal question"]})
    index_json(capsys)
    hermes_store(store, {"h-new": ["the new narwhal question"]})
    monkeypatch.setattr(type(PARSERS["hermes"]), "version", PARSERS["hermes"].version + 1)
    index_json(capsys)
    assert search_ids(capsys, "walrus") == [] and search_ids(capsys, "narwhal") == ["h-new"]


def test_status_says_how_long_each_agent_keeps_transcripts(tmp_path):
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    (home / ".claude").mkdir(parents=True)
    assert PARSERS["claude"].retention(env)["days"] == 30   # Claude Code's default
    (home / ".claude" / "settings.json").write_text('{"cleanupPeriodDays": 99}')
    assert PARSERS["claude"].retention(env) == {"days": 99, "setting": "cleanupPeriodDays in %s"
                                                % (home / ".claude" / "settings.json")}
    assert PARSERS["gemini"].retention(env) is None          # off unless enabled
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text('{"general": {"sessionRetention": {"enabled": true, "maxAge": "2w"}}}')
    assert PARSERS["gemini"].retention(env)["days"] == 14
    (home / ".hermes").mkdir()
    (home / ".hermes" / "config.yaml").write_text("model: x\nsessions:\n  auto_prune: true\n  retention_days: 45\n")
    assert PARSERS["hermes"].retention(env)["days"] == 45
    assert PARSERS["pi"].retention(env) is None


def test_status_text_warns_that_claude_deletes_and_sesame_keeps(env, capsys, tmp_path):
    proj = tmp_path / "home" / ".claude" / "projects" / "-home-dev-x"
    proj.mkdir(parents=True)
    with open(str(proj / "11111111-2222-4333-8444-555555555555.jsonl"), "w") as f:
        f.write(line({"type": "user", "uuid": "u1", "sessionId": "11111111-2222-4333-8444-555555555555", "cwd": "/home/dev/x",
                      "timestamp": "2026-03-01T10:00:00.000Z", "message": {"role": "user", "content": "hello there"}}))
    write_config({"sources": [{"parser": "claude", "path": str(proj.parent)}]}, tmp_path)
    run(capsys, "index")
    out = run(capsys, "status")[1]
    assert "claude deletes transcripts after 30 days" in out and "Sesame keeps what it indexed" in out


def test_appended_message_becomes_searchable(corpus, capsys):
    path = [os.path.join(d, f) for d, _, fs in os.walk(corpus) for f in fs if "cccc3333" in f][0]
    with open(path, "a") as f:
        f.write(line({"type": "message", "id": "zz", "parentId": None, "timestamp": "2026-02-10T11:00:00.000Z",
                      "message": {"role": "user", "content": "also bump the wombat dependency"}}))
    assert search_ids(capsys, "wombat") == ["cccc3333-ci"]


# -- Freshness: what a search sees at once, and what within the sweep ---------------------------

def age(root, days=30):
    """Make every file and folder under root look untouched for `days`, as an old history does."""
    t = time.time() - days * 86400
    for d, _, fs in os.walk(str(root), topdown=False):
        for f in fs:
            os.utime(os.path.join(d, f), (t, t))
        os.utime(d, (t, t))


def append_user(path, text, when="2026-06-01T00:00:00.000Z"):
    with open(path, "a") as f:
        f.write(line({"type": "message", "id": "app-%d" % time.monotonic_ns(), "parentId": None, "timestamp": when,
                      "message": {"role": "user", "content": text}}))


@pytest.fixture
def history(env, capsys, monkeypatch, tmp_path):
    """40 old, idle pi sessions in 4 project folders (p0 is a real folder), indexed and aged; each
    search sweeps 5 older files."""
    monkeypatch.setattr(sesame, "SWEEP_MIN_FILES", 5)
    monkeypatch.setattr(sesame, "SWEEP_SECONDS", 0)
    project = tmp_path / "p0"
    project.mkdir()
    paths = []
    for i in range(40):
        cwd = str(project) if i % 4 == 0 else "/home/dev/p%d" % (i % 4)
        w = PiWriter(env, "old-%02d" % i, cwd=cwd, start="2026-01-%02dT10:00:00.000Z" % (1 + i % 28))
        w.user("old session number %d about routine things" % i).assistant("done")
        paths.append(w.save())
    age(env)
    assert run(capsys, "index")[0] == 0
    paths = Paths(paths)
    paths.project = project
    return paths


class Paths(list):
    """A list that can carry attributes."""


@pytest.fixture
def counted_stats(monkeypatch):
    """How many session files each refresh compares with the disk."""
    calls = []
    original = sesame.stat_file

    def counting(path, parser, st=None):
        calls.append(path)
        return original(path, parser, st)
    monkeypatch.setattr(sesame, "stat_file", counting)
    return calls


def test_a_search_compares_a_bounded_number_of_old_files_not_all(history, capsys, counted_stats):
    for _ in range(3):
        del counted_stats[:]
        assert search_ids(capsys, "routine") != []
        assert len(counted_stats) == 5   # the sweep's share; nothing else is active or in this folder


def test_a_history_dated_now_is_not_compared_file_by_file_on_every_search(env, capsys, monkeypatch, counted_stats):
    monkeypatch.setattr(sesame, "SWEEP_MIN_FILES", 5)
    monkeypatch.setattr(sesame, "SWEEP_SECONDS", 0)
    monkeypatch.setattr(sesame, "ACTIVE_MAX_FILES", 3, raising=False)
    paths = [PiWriter(env, "copy-%02d" % i, cwd="/home/dev/p%d" % (i % 3)).user("restored session %d" % i).save()
             for i in range(30)]
    age(env, days=0.01)   # a history copied a quarter of an hour ago: every file looks recent
    os.utime(paths[17], (time.time() - 60,) * 2)   # and one session an agent has written since
    assert run(capsys, "index")[0] == 0
    for _ in range(3):
        del counted_stats[:]
        assert search_ids(capsys, "restored") != []
        assert len(counted_stats) == 3 + 5   # the newest few, and the sweep's share
    append_user(paths[17], "the agent goes on: the tapir step")   # the newest file is checked by every search
    assert search_ids(capsys, "tapir") == ["copy-17"]
    append_user(paths[17], "and the kinkajou step")
    assert search_ids(capsys, "kinkajou") == ["copy-17"]


def test_the_sweep_checks_every_file_within_files_over_share_searches(history, capsys, counted_stats):
    for _ in range(8):
        search_ids(capsys, "routine")
    assert sorted(set(counted_stats)) == sorted(history)


def test_a_new_session_in_a_known_or_a_new_folder_is_found_by_the_next_search(history, env, capsys):
    PiWriter(env, "new-one", cwd="/home/dev/p1").user("a fresh axolotl question").save()
    PiWriter(env, "new-two", cwd="/home/dev/brand/new").user("a fresh capybara question").save()
    assert search_ids(capsys, "axolotl") == ["new-one"]
    assert search_ids(capsys, "capybara") == ["new-two"]


def test_an_append_to_an_active_session_is_found_by_the_next_search(history, env, capsys):
    path = PiWriter(env, "active", cwd="/home/dev/p2").user("working on the quokka feature").save()
    assert search_ids(capsys, "quokka") == ["active"]
    append_user(path, "and now the wallaby part")
    assert search_ids(capsys, "wallaby") == ["active"]


def test_an_append_to_an_old_idle_session_of_this_folder_is_found_at_once(history, capsys, monkeypatch):
    monkeypatch.chdir(history.project / ".")
    append_user(history[8], "resumed: the numbat migration is back")   # old-08 ran in p0
    assert search_ids(capsys, "numbat") == ["old-08"]


def test_an_append_to_an_old_idle_session_elsewhere_is_found_within_the_sweep(history, capsys):
    append_user(history[13], "resumed elsewhere: the dugong report")
    found = [search_ids(capsys, "dugong") for _ in range(9)]
    assert ["old-13"] in found


def _versions(tmp_path):
    """{session id: the parser version its file was read with}, from the index."""
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    try:
        return dict(con.execute("SELECT s.session_id, f.parser_version FROM sessions s JOIN files f ON f.id = s.file_id"))
    finally:
        con.close()


def test_after_an_upgrade_a_search_reads_a_share_of_the_files_a_new_parser_version_reads_again(
        history, env, capsys, monkeypatch, tmp_path):
    # Old sessions, each untouched for a different while (old-39 the latest), indexed.
    t = time.time() - 90 * 86400
    for i, path in enumerate(history):
        os.utime(path, (t + i * 3600, t + i * 3600))
    assert run(capsys, "index")[0] == 0
    pi = sesame.PARSERS["pi"]
    old = pi.version
    # A new Sesame reads pi's files differently; a search may read about three files' worth of them.
    monkeypatch.setattr(sesame.PiParser, "version", old + 1)
    monkeypatch.setattr(sesame, "REREAD_BYTES", 2 * os.path.getsize(history[0]) + 1)
    code, out, err = run(capsys, "search", "routine", "--json")
    assert code == 0 and json.loads(out)["results"]  # answered from the index as it is
    versions = _versions(tmp_path)
    again = sorted(sid for sid, v in versions.items() if v == old + 1)
    assert again == ["old-37", "old-38", "old-39"]  # the latest first, a bounded share
    assert "37 session files indexed by an earlier version of Sesame are read again a few at each search; " \
           "`sesame index` reads them all now" in err
    assert json.loads(run(capsys, "status", "--json")[1])["readAgain"] == 37
    assert "upgrade:  37 session files indexed by an earlier version of Sesame" in run(capsys, "status")[1]
    # An append to a file still waiting is read at once, like any change (this folder's session).
    monkeypatch.chdir(history.project)
    append_user(history[0], "resumed: the numbat migration is back")
    assert search_ids(capsys, "numbat") == ["old-00"]
    # The next searches go on, each with its share, and say so until none is left.
    for n in range(20):
        code, out, err = run(capsys, "search", "routine", "--json")
        assert code == 0 and json.loads(out)["results"]
        if "earlier version" not in err:
            break
    assert 8 <= n < 20 and set(_versions(tmp_path).values()) == {old + 1}
    assert run(capsys, "search", "routine")[2] == ""  # nothing left to say, or to look up
    assert json.loads(run(capsys, "status", "--json")[1])["readAgain"] == 0
    assert "upgrade:" not in run(capsys, "status")[1]
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    assert con.execute("SELECT value FROM meta WHERE key = 'reread'").fetchone() == ("0",)


def test_after_an_upgrade_index_reads_again_every_file_a_new_parser_version_reads(history, capsys, monkeypatch, tmp_path):
    pi = sesame.PARSERS["pi"]
    monkeypatch.setattr(sesame.PiParser, "version", pi.version + 1)
    monkeypatch.setattr(sesame, "REREAD_BYTES", 1)
    code, out, err = run(capsys, "index")
    assert code == 0 and "40 indexed" in err + out
    assert set(_versions(tmp_path).values()) == {pi.version}
    assert run(capsys, "search", "routine")[2] == ""


# -- The full-text index does not keep what was replaced (merge_index) ----------------------------

def _fts_bytes(tmp_path):
    """The full-text index's data (FTS5's %_data table): what ranking queries read."""
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    try:
        return con.execute("SELECT sum(length(block)) FROM docs_fts_data").fetchone()[0]
    finally:
        con.close()


def _index_meta(tmp_path, key):
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    try:
        row = con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row and row[0]
    finally:
        con.close()


def _wordy_sessions(env, n=60, cwd="/home/dev/wordy"):
    """n pi sessions of 24 messages of 60 words each from a vocabulary of 600 (w000a...)."""
    import random
    rnd = random.Random(5)
    vocab = ["w%03d%s" % (i, "abcdefgh"[i % 8]) for i in range(600)]
    for i in range(n):
        w = PiWriter(env, "wordy-%02d" % i, cwd=cwd)
        for _ in range(12):
            w.user(" ".join(rnd.choice(vocab) for _ in range(60))).assistant(" ".join(rnd.choice(vocab) for _ in range(60)))
        w.save()


def _upgrade_without_merging(capsys, monkeypatch, times=1):
    """Every pi file read again by `sesame index` (a new parser version), with merging held off
    (as by the versions before merge_index): the full-text index keeps the replaced text."""
    floor = sesame.COMPACT_MIN_TOKENS
    monkeypatch.setattr(sesame, "COMPACT_MIN_TOKENS", 10 ** 12)
    for _ in range(times):
        monkeypatch.setattr(sesame.PiParser, "version", sesame.PiParser.version + 1)
        assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "COMPACT_MIN_TOKENS", floor)


def _bloated_index(env, capsys, monkeypatch, tmp_path, settle=False):
    """The wordy sessions (and what the caller wrote before) indexed, then all read again twice with
    merging held off; merging made due for an index this small. Returns the size of the full-text
    data as built (it now holds over 1.5 times that). `settle`: files and folders aged first."""
    monkeypatch.setattr(sesame, "COMPACT_MIN_TOKENS", 1000)
    _wordy_sessions(env)
    if settle:
        age(env)
    assert run(capsys, "index")[0] == 0
    fresh = _fts_bytes(tmp_path)
    _upgrade_without_merging(capsys, monkeypatch, times=2)
    assert _fts_bytes(tmp_path) > 1.5 * fresh
    return fresh


def test_sessions_read_again_leave_no_replaced_text_in_the_full_text_index(env, capsys, monkeypatch, tmp_path):
    # FTS5 deletes a row by adding markers; the old entries stay until a merge reaches them. Read
    # again four times (four upgrades), the index held 2.6 times its text at this size (and an aged
    # 1 GB one ranked a third slower): now each run that leaves half as much dead text as live
    # merges it out, and every search finds what it found before.
    monkeypatch.setattr(sesame, "COMPACT_MIN_TOKENS", 1000)
    _wordy_sessions(env)
    assert run(capsys, "index")[0] == 0
    fresh = _fts_bytes(tmp_path)
    queries = ["w001b w017b", "w123d", "w599h w002c w300e"]
    found = [search_ids(capsys, q, "--limit", "20") for q in queries]
    assert all(found)
    for _ in range(4):
        monkeypatch.setattr(sesame.PiParser, "version", sesame.PiParser.version + 1)
        code, out, err = run(capsys, "index")
        assert code == 0 and "60 indexed" in err and "the full-text index merged into one segment" in err
        assert _fts_bytes(tmp_path) <= 1.1 * fresh
        assert _index_meta(tmp_path, "fts_dead") == "0"
        assert [search_ids(capsys, q, "--limit", "20") for q in queries] == found
    code, out, err = run(capsys, "index", "--json")
    assert "merged into" not in err and json.loads(out)["merged"] is False   # nothing left to merge


def test_an_index_in_many_segments_is_merged_into_one_and_finds_what_it_found(env, capsys, monkeypatch, tmp_path):
    """Each transaction that writes adds a segment to the full-text index, and a search looks a word
    up in every one: more than FTS_SEGMENTS_MAX and `index` merges them into one (status says it is
    due, and in how many segments the index is), with no dead text to speak of, while a search that
    writes leaves that merge alone; every search finds what it found before."""
    monkeypatch.setattr(sesame, "FTS_SEGMENTS_MAX", 10 ** 6)
    _wordy_sessions(env)
    assert run(capsys, "index")[0] == 0
    queries = ["w001b w017b", "w123d", "w599h w002c w300e"]
    found = [search_ids(capsys, q, "--limit", "20") for q in queries]
    assert all(found)
    for i in range(6):   # appends, each indexed by a run of its own: a segment each
        PiWriter(env, "seg-%d" % i, cwd="/home/dev/seg").user("w123d and w001b again, %d" % i).save()
        assert run(capsys, "index")[0] == 0
        found = [search_ids(capsys, q, "--limit", "20") for q in queries]
    status = json.loads(run(capsys, "status", "--json")[1])
    segments = status["ftsSegments"]
    assert segments > 2 and status["mergeDue"] is False and _index_meta(tmp_path, "fts_dead") in ("0", None)
    monkeypatch.setattr(sesame, "FTS_SEGMENTS_MAX", 2)
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["mergeDue"] is True and status["ftsSegments"] == segments
    assert "in %d segments" % segments in run(capsys, "status")[1]
    # a search that reads an append leaves such a merge alone (seconds at 1 GB: `index`'s, watch's, a
    # server's background's), and finds the append
    PiWriter(env, "seg-late", cwd="/home/dev/seg").user("w123d once more, late").save()
    assert "seg-late" in search_ids(capsys, "w123d", "--limit", "20")
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["ftsSegments"] > segments and status["mergeDue"] is True
    found = [search_ids(capsys, q, "--limit", "20") for q in queries]
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["merged"] is True
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["ftsSegments"] == 1 and status["mergeDue"] is False
    assert [search_ids(capsys, q, "--limit", "20") for q in queries] == found


def test_an_index_from_before_the_count_is_merged_once(env, capsys, monkeypatch, tmp_path):
    fresh = _bloated_index(env, capsys, monkeypatch, tmp_path)
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    con.execute("DELETE FROM meta WHERE key='fts_dead'")   # (what an older Sesame's index holds)
    con.commit()
    con.close()
    assert json.loads(run(capsys, "status", "--json")[1])["mergeDue"] is True
    assert "merge:    the full-text index holds text it replaced" in run(capsys, "status")[1]
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["merged"] is True and _fts_bytes(tmp_path) <= 1.1 * fresh
    assert json.loads(run(capsys, "index", "--json")[1])["merged"] is False
    assert json.loads(run(capsys, "status", "--json")[1])["mergeDue"] is False
    assert "merge:" not in run(capsys, "status")[1]


def test_watch_merges_the_replaced_text_out_a_share_at_each_round(env, capsys, monkeypatch, tmp_path):
    # `watch` merges a share at each round (COMPACT_WATCH_SECONDS), then the next round goes on with
    # the same merge, also when an agent's append was indexed in between (a new segment: the merge
    # began again at every round, and never ended, before `fts_merging`).
    path = PiWriter(env, "active", cwd="/home/dev/wordy").user("the first step").save()
    fresh = _bloated_index(env, capsys, monkeypatch, tmp_path)
    monkeypatch.setattr(sesame, "COMPACT_PAGES", 1)
    monkeypatch.setattr(sesame, "COMPACT_WATCH_SECONDS", 0.05)
    real_step, steps, rounds, real_sleep = sesame.Store.merge_step, [], [], time.sleep

    def slow_step(store, *a):
        steps.append(len(rounds))
        real_sleep(0.01)
        return real_step(store, *a)

    def sleep(seconds):
        rounds.append(_fts_bytes(tmp_path))
        if _index_meta(tmp_path, "fts_dead") == "0" or len(rounds) >= 200:
            raise KeyboardInterrupt
        # An agent at work meanwhile: each round indexes an append (a new segment) before it merges.
        append_user(path, "round %d: the tayra notes" % len(rounds))
    monkeypatch.setattr(sesame.Store, "merge_step", slow_step)
    monkeypatch.setattr(sesame.time, "sleep", sleep)
    code, out, err = run(capsys, "watch", "--interval", "1")
    assert code == 0 and rounds[-1] <= 1.1 * fresh and 3 <= len(rounds) < 200
    per_round = collections.Counter(steps)
    assert max(per_round.values()) <= 7   # 50 ms of 10 ms steps a round
    assert "the full-text index merged into one segment" in err


def test_index_on_a_terminal_shows_that_it_merges(env, capsys, monkeypatch, tmp_path):
    # 4.6 s at 1 GB after an upgrade: the progress line says what the pause is.
    import io
    _bloated_index(env, capsys, monkeypatch, tmp_path)
    monkeypatch.setattr(sesame, "COMPACT_PAGES", 1)
    shown = io.StringIO()
    ctx = sesame.Context()
    store = ctx.store()
    try:
        summary = sesame.run_index(store, ctx.sources, progress=sesame._progress_printer(shown), policy=ctx.policy)
    finally:
        store.close()
    assert summary.merged and "\rmerging the full-text index into one segment: 0s" in shown.getvalue()


def test_the_index_log_is_cut_back_after_a_big_write(env, capsys, monkeypatch, tmp_path):
    # A rebuild is one transaction: the log (index.sqlite-wal) grows to the index's size. While
    # another connection keeps the index open (an MCP server, for days), SQLite kept the file at
    # that size; now the next write, once the log is copied in, cuts it back to WAL_SIZE_LIMIT
    # (at 100 MB, a 60 MB log beside a running `sesame mcp`, 4 MB after a search that wrote).
    monkeypatch.setattr(sesame, "WAL_SIZE_LIMIT", 64 * 1024)
    monkeypatch.setattr(sesame, "WAL_AUTOCHECKPOINT", 16)   # (pages: the log is copied in at each commit here)
    _wordy_sessions(env)
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.chdir(project)
    path = PiWriter(env, "active", cwd=str(project)).user("the first step").save()
    assert run(capsys, "index")[0] == 0
    db = str(tmp_path / "data" / "index.sqlite")
    server = sqlite3.connect(db)   # (another process's connection: the log is not removed when sesame ends)
    try:
        assert server.execute("SELECT count(*) FROM sessions").fetchall() == [(61,)]
        assert run(capsys, "index", "--full")[0] == 0
        big = os.path.getsize(db + "-wal")
        assert big > 512 * 1024
        append_user(path, "the next step: the margay notes")
        assert search_ids(capsys, "margay") == ["active"]
        assert os.path.getsize(db + "-wal") < big / 2   # cut back, then what this write needed (it stayed at 80%)
    finally:
        server.close()


def test_a_search_merges_only_when_it_writes_anyway_and_for_a_bounded_time(env, capsys, monkeypatch, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.chdir(project)
    path = PiWriter(env, "active", cwd=str(project)).user("the first step").save()
    # (settled folders: a search that finds nothing to read writes nothing)
    fresh = _bloated_index(env, capsys, monkeypatch, tmp_path, settle=True)
    bloated = _fts_bytes(tmp_path)
    # A search that reads nothing writes nothing: merging would cost it a write and the log's
    # checkpoint when the process ends (~20 ms at 1 GB), more than the merge itself.
    assert search_ids(capsys, "w123d") != []
    assert _fts_bytes(tmp_path) == bloated and _index_meta(tmp_path, "fts_dead") != "0"
    # One that reads an append merges too, for at most COMPACT_SEARCH_SECONDS (steps slowed here).
    steps = []
    real_step = sesame.Store.merge_step

    def slow_step(store):
        steps.append(time.monotonic())
        time.sleep(0.004)
        return real_step(store)
    monkeypatch.setattr(sesame.Store, "merge_step", slow_step)
    monkeypatch.setattr(sesame, "COMPACT_PAGES", 1)
    monkeypatch.setattr(sesame, "COMPACT_SEARCH_SECONDS", 0.02)
    append_user(path, "the echidna step")
    t = time.monotonic()
    assert search_ids(capsys, "echidna") == ["active"]
    assert 1 <= len(steps) <= 6 and steps[-1] - t < 0.1
    assert _fts_bytes(tmp_path) != bloated   # it began
    # `sesame index` ends it.
    assert "merged into one segment" in run(capsys, "index")[2]
    assert _fts_bytes(tmp_path) <= 1.1 * fresh
    assert search_ids(capsys, "echidna") == ["active"]


def _journal_home(tmp_path, agent, n=6):
    """n old sessions of `agent` in its own layout under tmp_path/home, run in /home/dev/a (not the
    caller's folder), with the agent's prompt history; configured as the only source. Returns
    (source folder, journal, {session id: path}, the journal line for a session id)."""
    home = tmp_path / "home"
    paths = {}
    for i in range(n):
        sid = "%08d-2222-4333-8444-555555555555" % i
        if agent == "claude":
            root, journal = home / ".claude" / "projects", home / ".claude" / "history.jsonl"
            paths[sid] = write_jsonl(root / "-home-dev-a" / (sid + ".jsonl"), [
                dict(cc_cl_user("u%d" % i, "2026-01-0%dT10:00:00.000Z" % (i + 1), "routine question %d" % i),
                     sessionId=sid, cwd="/home/dev/a")])
        elif agent == "qwen":   # 0.24: a line per run that ended, in ~/.qwen/usage_record.jsonl
            root, journal = home / ".qwen" / "projects", home / ".qwen" / "usage_record.jsonl"
            paths[sid] = write_jsonl(root / "-home-dev-a" / "chats" / (sid + ".jsonl"), [
                dict(ot_q("u1", None, "user", message={"role": "user", "parts": [{"text": "routine question %d" % i}]}),
                     sessionId=sid, cwd="/home/dev/a")])
        else:
            root, journal = home / ".codex" / "sessions", home / ".codex" / "history.jsonl"
            paths[sid] = write_jsonl(root / "2026" / "01" / "01" / ("rollout-2026-01-01T10-00-00-%s.jsonl" % sid), [
                cc_cx_meta(sid, "2026-01-01T10:00:00.000Z", cwd="/home/dev/a"),
                cc_cx_msg("2026-01-01T10:00:01.000Z", "user", "routine question %d" % i)])

    def entry(sid):
        if agent == "claude":
            return line({"display": "a prompt", "pastedContents": {}, "timestamp": 1767261600000,
                         "project": "/home/dev/a", "sessionId": sid})
        if agent == "qwen":
            return line({"version": 1, "sessionId": sid, "timestamp": 1767261601570, "startTime": 1767261600000,
                         "project": "/home/dev/a", "durationMs": 1570, "models": {}, "tools": {"totalCalls": 0}})
        return line({"session_id": sid, "ts": 1767261600, "text": "a prompt"})
    with open(str(journal), "w") as f:
        f.writelines(entry(sid) for sid in paths)
    write_config({"sources": [{"parser": agent, "path": str(root)}]}, tmp_path)
    return root, journal, paths, entry


def test_the_folders_of_an_old_claude_session_are_compared_with_its_session_not_by_every_search(
        env, capsys, monkeypatch, tmp_path):
    """Claude Code keeps each session's sub-agents in <project>/<session id>/subagents/: two folders
    per session, which every search compared (4,000 in a history of 2,000 such sessions: ~16 ms of
    every search). They change only while their session's transcript is written: a search compares
    them when it compares that file (it was written lately, its journal line came, it ran in the
    caller's folder), and the others a slice at a time. A resumed session's new sub-agent and a new
    session's are found by the next search; one put in an old folder otherwise, within the slices."""
    root, journal, paths, entry = _journal_home(tmp_path, "claude", n=24)
    project = root / "-home-dev-a"
    for n, sid in enumerate(paths):
        write_jsonl(project / sid / "subagents" / ("agent-old%02d.jsonl" % n), [dict(
            cc_cl_user("s%d" % n, "2026-01-01T10:00:01.000Z", "sub-agent task %d" % n, isSidechain=True,
                       agentId="old%02d" % n), sessionId=sid, cwd="/home/dev/a")])
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "routine") != []   # (reads the journal written with the history)
    owned = {str(project / sid) for sid in paths} | {str(project / sid / "subagents") for sid in paths}
    stats, real_stat = [], os.stat
    monkeypatch.setattr(sesame.os, "stat", lambda p, *a, **k: stats.append(os.fspath(p)) or real_stat(p, *a, **k))
    monkeypatch.chdir(tmp_path)   # a folder of no session
    for _ in range(3):
        del stats[:]
        assert search_ids(capsys, "routine") != []
        compared = owned & set(stats)
        assert len(compared) <= 4, sorted(compared)   # a slice (48 / 16 = 3 folders), not all 48
    monkeypatch.setattr(sesame, "FOLDER_SHARE", 10 ** 6)   # (no slice in turn reaches them by chance)
    sid = list(paths)[7]   # resumed: its transcript grows, a sub-agent starts, the journal says so
    with open(str(paths[sid]), "a") as f:
        f.write(line(dict(cc_cl_user("r1", "2026-06-01T10:00:00.000Z", "resumed: the okapi plan"),
                          sessionId=sid, cwd="/home/dev/a")))
    write_jsonl(project / sid / "subagents" / "agent-new01.jsonl", [dict(
        cc_cl_user("n1", "2026-06-01T10:00:02.000Z", "sub-agent: survey the okapi enclosure", isSidechain=True,
                   agentId="new01"), sessionId=sid, cwd="/home/dev/a")])
    with open(str(journal), "a") as f:
        f.write(entry(sid))
    assert sorted(search_ids(capsys, "okapi")) == sorted([sid, "agent-new01"])
    new = "%08d-2222-4333-8444-555555555555" % 99   # a new session, with a sub-agent, in the old project
    write_jsonl(project / (new + ".jsonl"), [dict(cc_cl_user("w1", "2026-06-02T10:00:00.000Z", "the quagga census"),
                                                  sessionId=new, cwd="/home/dev/a")])
    write_jsonl(project / new / "subagents" / "agent-new02.jsonl", [dict(
        cc_cl_user("w2", "2026-06-02T10:00:01.000Z", "sub-agent: count the quagga", isSidechain=True,
                   agentId="new02"), sessionId=new, cwd="/home/dev/a")])
    assert sorted(search_ids(capsys, "quagga")) == sorted([new, "agent-new02"])
    # an old session's folder changed by something else (a restore) is seen within the slices
    write_jsonl(project / list(paths)[3] / "subagents" / "agent-restored.jsonl", [dict(
        cc_cl_user("x1", "2026-01-01T10:00:05.000Z", "restored: the zorilla notes", isSidechain=True,
                   agentId="restored"), sessionId=list(paths)[3], cwd="/home/dev/a")])
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.setattr(sesame, "FOLDER_SHARE", 16)
    found = []
    for second in range(sesame.FOLDER_SHARE):
        monkeypatch.setattr(sesame.time, "time_ns", lambda s=second: (1800000000 + s) * 10 ** 9)
        found.append(search_ids(capsys, "zorilla"))
    assert ["agent-restored"] in found


def _codex_past_days(tmp_path, capsys, monkeypatch):
    """A Codex history of 48 past days' folders, a session each, indexed and aged, every stat
    recorded: (root, today, rollout(day, sid, text), days, their folders, the stats)."""
    root = tmp_path / "home" / ".codex" / "sessions"
    today = datetime.date.today()

    def rollout(day, sid, text):
        return write_jsonl(root / day.strftime("%Y/%m/%d") / ("rollout-%sT10-00-00-%s.jsonl" % (day.isoformat(), sid)), [
            cc_cx_meta(sid, "%sT10:00:00.000Z" % day.isoformat(), cwd="/home/dev/a"),
            cc_cx_msg("%sT10:00:01.000Z" % day.isoformat(), "user", text)])
    days = [today - datetime.timedelta(days=100 + n) for n in range(48)]   # 48 past days
    for n, day in enumerate(days):
        rollout(day, "%08d-2222-4333-8444-555555555555" % n, "routine question %d" % n)
    write_config({"sources": [{"parser": "codex", "path": str(root)}]}, tmp_path)
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    stats, real_stat = [], os.stat
    monkeypatch.setattr(sesame.os, "stat", lambda p, *a, **k: stats.append(os.fspath(p)) or real_stat(p, *a, **k))
    return root, today, rollout, days, {str(root / d.strftime("%Y/%m/%d")) for d in days}, stats


def _codex_new_days_and_resumed(tmp_path, root, today, rollout, days, find):
    """What the next search (`find`) finds at once in a Codex history of past days' folders: a new
    day's folder, files added to today's and yesterday's (or another time zone's today), and an old
    session resumed (its file grows, its journal says so)."""
    rollout(today, "new-0001", "the quokka census")     # a new day: its folder is new
    assert find("quokka") == ["new-0001"]
    rollout(today, "new-0002", "the tapir census")      # today's folder, written lately
    assert find("tapir") == ["new-0002"]
    yesterday = today - datetime.timedelta(days=1)
    rollout(yesterday, "new-0003", "the margay census")
    assert find("margay") == ["new-0003"]
    rollout(yesterday, "new-0004", "the kinkajou census")
    assert find("kinkajou") == ["new-0004"]
    old = root / days[4].strftime("%Y/%m/%d")
    with open(str(next(old.iterdir())), "a") as f:
        f.write(line(cc_cx_msg("%sT10:00:00.000Z" % today.isoformat(), "user", "resumed: the okapi plan")))
    with open(str(tmp_path / "home" / ".codex" / "history.jsonl"), "a") as f:
        f.write(line({"session_id": "00000004-2222-4333-8444-555555555555", "ts": int(time.time()), "text": "x"}))
    assert find("okapi") == ["00000004-2222-4333-8444-555555555555"]


def _codex_unsettled_folder(tmp_path, root, rollout, days, find):
    """A past day's folder listed while it changed (its time not settled: recorded as 0) is
    compared at every search: a file added to it is found by the next (`find`)."""
    late = root / days[20].strftime("%Y/%m/%d")
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    with con:
        assert con.execute("UPDATE dirs SET mtime_ns = 0 WHERE path = ?", (str(late),)).rowcount == 1
    con.close()
    rollout(days[20], "late-01", "the serval notes")
    age(late)
    assert find("serval") == ["late-01"]


def test_past_days_codex_folders_are_compared_a_slice_at_a_time_and_todays_at_every_search(
        env, capsys, monkeypatch, tmp_path):
    """Codex writes each session in sessions/YYYY/MM/DD, the day it started, and a resumed one into
    its own file: a past day's folder gets no new file. Every search compared every one (~1,000 in
    a long history: 2.5 ms of each). Now a past day's folder, quiet or named so, is compared a slice
    at a time; a new day's folder (its month's folder changes), a file added to today's or
    yesterday's and a resumed session are found by the next search, and a file put in a past day's
    folder (a restore) within the slices. A restored history (every folder's time recent) is still
    compared a slice at a time: its folders' names say they are past."""
    root, today, rollout, days, day_folders, stats = _codex_past_days(tmp_path, capsys, monkeypatch)
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.chdir(tmp_path)   # a folder of no session

    def searches_compare_a_slice():
        for _ in range(3):
            del stats[:]
            assert search_ids(capsys, "routine") != []
            assert 1 <= len(day_folders & set(stats)) <= 5   # a slice (48 / 16 = 3 folders), not all 48
            assert {str(root), str(root / days[0].strftime("%Y")), str(root / days[0].strftime("%Y/%m"))} <= set(stats)
    searches_compare_a_slice()
    # A history restored: every folder's time an hour ago (settled, within the two days), indexed so.
    hour_ago = time.time() - 3600
    for d, _, _ in os.walk(str(root)):
        os.utime(d, (hour_ago, hour_ago))
    assert run(capsys, "index")[0] == 0
    searches_compare_a_slice()
    monkeypatch.setattr(sesame, "FOLDER_SHARE", 10 ** 6)   # (no slice in turn reaches them by chance)
    find = lambda q: search_ids(capsys, q)
    _codex_new_days_and_resumed(tmp_path, root, today, rollout, days, find)
    age(tmp_path / "home")   # (days later: the folders written today are quiet too)
    assert search_ids(capsys, "routine") != []
    _codex_unsettled_folder(tmp_path, root, rollout, days, find)
    rollout(days[30], "restored-01", "restored: the zorilla notes")   # a past day's folder, changed
    monkeypatch.setattr(sesame, "FOLDER_SHARE", 16)
    found = []
    for second in range(sesame.FOLDER_SHARE):
        monkeypatch.setattr(sesame.time, "time_ns", lambda s=second: (1800000000 + s) * 10 ** 9)
        found.append(search_ids(capsys, "zorilla"))
    assert ["restored-01"] in found and found.count([]) >= 1


def warm_search_ids(warm, query):
    """The session ids an MCP server's `search` call (its WarmIndex) answers, best first."""
    reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "search", "arguments": {"query": query}}}, warm)
    return [r["sessionId"] for r in reply["result"]["structuredContent"]["results"]]


def test_a_servers_calls_reading_appends_leave_the_full_text_index_as_a_rebuild_would(env, capsys, monkeypatch, tmp_path):
    """Each append makes the server's call delete the session's last part from the full-text index
    (by giving FTS5 its exact old text, rebuilt from the chunks) and index it again; the camelCase
    parts of those texts are kept from one call to the next (_PartsMemo). A wrong old text would
    leave its words behind: after 12 appends, the index holds every word as often as a rebuild's."""
    monkeypatch.chdir(tmp_path)
    w = PiWriter(env, "grow-1", cwd="/home/dev/grow")
    w.user("Set up the WebSocketServer relay.").assistant("The HttpClient pool is configured.")
    w.save()
    run(capsys, "index")
    warm = sesame.WarmIndex()

    def vocabulary():
        con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
        con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, docs_fts, 'row')")
        try:
            return con.execute("SELECT term, doc, cnt FROM temp.v ORDER BY term").fetchall()
        finally:
            con.close()
    try:
        for n in range(12):
            w.user("Wire the PaymentIntent%dHandler to OAuth2Client number %d." % (n, n))
            w.tool("bash", {"command": "grep -rn StreamWriter%d src/" % n}, "src/app.py: StreamWriter%d" % n)
            w.assistant("Done with the ReconnectTimer%d." % n)
            w.save()
            assert warm_search_ids(warm, "ReconnectTimer%d" % n) == ["grow-1"]
    finally:
        warm.close()
    served = vocabulary()
    assert ("payment", 1, 12) in served   # (a part of every PaymentIntentNHandler)
    run(capsys, "index", "--full")
    assert vocabulary() == served


def test_a_servers_calls_keep_the_folders_while_they_write_only_the_callers_session(env, capsys, monkeypatch, tmp_path):
    """An agent's session grows between two of its calls, so each call's refresh writes it: the
    folders the call compares are kept all the same (their table unchanged), and a new folder is
    found by the next call, as by a search."""
    monkeypatch.chdir(tmp_path)
    w = PiWriter(env, "grow-1", cwd="/home/dev/grow")
    w.user("Set up the webhook relay.").assistant("Relay configured.")
    w.save()
    age(env)   # (folders whose time has settled: one changed in the last seconds is listed again)
    os.utime(w.path)   # (the caller's session, being written)
    run(capsys, "index")
    reads = []
    listings = sesame.Store.listings
    monkeypatch.setattr(sesame.Store, "listings", lambda self, sources=None: reads.append(1) or listings(self, sources))
    warm = sesame.WarmIndex()

    call = functools.partial(warm_search_ids, warm)
    try:
        assert call("webhook") == ["grow-1"]
        first = len(reads)
        for n in range(3):
            w.user("and the capybara%d step" % n).save()
            assert call("capybara%d" % n) == ["grow-1"]
        assert len(reads) == first
        PiWriter(env, "new-1", cwd="/home/dev/other").user("the okapi question").save()
        assert call("okapi") == ["new-1"]
        assert call("okapi") == ["new-1"] and len(reads) == first + 1   # (the folders written: read again once)
    finally:
        warm.close()


def test_a_servers_call_compares_no_past_days_folder_and_still_finds_todays_and_resumed_sessions(
        env, capsys, monkeypatch, tmp_path):
    """An MCP server's call leaves a past day's Codex folder to the server's background (which
    compares every file every 30 s, as it does the sweep): it stats none of them (a long history has
    ~1,000), while a new day's folder, a file added to today's or yesterday's, a resumed session and
    a folder whose time was not settled are found by the next call, as by a search."""
    root, today, rollout, days, day_folders, stats = _codex_past_days(tmp_path, capsys, monkeypatch)
    monkeypatch.chdir(tmp_path)   # a folder of no session
    warm = sesame.WarmIndex()

    call = functools.partial(warm_search_ids, warm)
    try:
        for _ in range(3):
            del stats[:]
            assert call("routine") != []
            assert not day_folders & set(stats)   # (a search compares a slice of them: see the test above)
            assert {str(root), str(root / days[0].strftime("%Y/%m"))} <= set(stats)
        _codex_new_days_and_resumed(tmp_path, root, today, rollout, days, call)
        _codex_unsettled_folder(tmp_path, root, rollout, days, call)
        # A file restored into a past day's folder: the server's background round finds it.
        age(tmp_path / "home")   # (days later: every folder's time settled, and so recorded)
        assert run(capsys, "index")[0] == 0
        assert call("routine") != []
        rollout(days[30], "restored-01", "restored: the zorilla notes")
        del stats[:]
        assert call("zorilla") == [] and not day_folders & set(stats)
        ctx = sesame.Context()
        store = ctx.store()
        try:
            sesame.refresh_index(ctx, store, wait_seconds=0, lend=True, every=30)   # (what _keep_fresh runs)
        finally:
            store.close()
        assert call("zorilla") == ["restored-01"]
    finally:
        warm.close()


def test_a_new_sub_agent_of_an_old_session_of_the_callers_folder_is_found_among_hundreds(env, capsys, monkeypatch,
                                                                                          tmp_path):
    """Searching from a project of many sessions compares all their own folders (read at once):
    a sub-agent an old session of that project started is found by the next search there."""
    work = tmp_path / "work"
    work.mkdir()
    root = tmp_path / "home" / ".claude" / "projects"
    project = root / "-work"
    sids = ["%08d-2222-4333-8444-555555555555" % i for i in range(70)]
    for n, sid in enumerate(sids):
        write_jsonl(project / (sid + ".jsonl"), [dict(cc_cl_user("u%d" % n, "2026-01-01T10:00:00.000Z",
                                                                 "routine question %d" % n), sessionId=sid, cwd=str(work))])
        write_jsonl(project / sid / "subagents" / ("agent-old%02d.jsonl" % n), [dict(
            cc_cl_user("s%d" % n, "2026-01-01T10:00:01.000Z", "sub-agent task %d" % n, isSidechain=True,
                       agentId="old%02d" % n), sessionId=sid, cwd=str(work))])
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.setattr(sesame, "FOLDER_SHARE", 10 ** 6)   # (no slice in turn reaches it by chance)
    monkeypatch.chdir(work)
    assert search_ids(capsys, "routine") != []
    write_jsonl(project / sids[41] / "subagents" / "agent-late.jsonl", [dict(
        cc_cl_user("l1", "2026-06-01T10:00:00.000Z", "sub-agent: the serval survey", isSidechain=True,
                   agentId="late"), sessionId=sids[41], cwd=str(work))])
    assert search_ids(capsys, "serval") == ["agent-late"]


@pytest.mark.parametrize("agent", ["claude", "codex", "qwen"])
def test_a_resumed_old_session_is_found_by_the_next_search_from_any_folder(env, capsys, monkeypatch, tmp_path, agent):
    root, journal, paths, entry = _journal_home(tmp_path, agent)
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "routine") != []
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)   # the sweep reaches nothing
    monkeypatch.chdir(tmp_path)                                       # a folder of no session
    for n, sid in enumerate(list(paths)[2:5]):
        with open(str(paths[sid]), "a") as f:   # the agent resumes it: its transcript grows...
            f.write(line(dict(cc_cl_user("r%d" % n, "2026-06-01T10:00:00.000Z", "resumed: the narwhal%d plan" % n),
                              sessionId=sid, cwd="/home/dev/a") if agent == "claude" else
                         dict(ot_q("r%d" % n, "u1", "user", message={"role": "user", "parts": [
                             {"text": "resumed: the narwhal%d plan" % n}]}), sessionId=sid, cwd="/home/dev/a")
                         if agent == "qwen" else
                         cc_cx_msg("2026-06-01T10:00:00.000Z", "user", "resumed: the narwhal%d plan" % n)))
        with open(str(journal), "a") as f:      # ...and its prompt history names it
            f.write(entry(sid))
        assert search_ids(capsys, "narwhal%d" % n) == [sid]


def test_a_claude_session_resumed_headless_is_found_by_the_next_search_from_any_folder(env, capsys, monkeypatch,
                                                                                       tmp_path, counted_stats):
    """`claude -p --resume ID` and the Agent SDK write no history.jsonl line; every Claude Code
    process keeps ~/.claude/sessions/<pid>.json naming its session while it runs (2.1.197, 2.1.332).
    A search compares the running sessions' files; once read, the file is among those written
    lately, which every search compares (so its last words, written as it ends, are found too)."""
    root, journal, paths, entry = _journal_home(tmp_path, "claude")
    running = tmp_path / "home" / ".claude" / "sessions"
    running.mkdir()
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)   # the sweep reaches nothing
    monkeypatch.chdir(tmp_path)                                       # a folder of no session
    sid = list(paths)[3]

    def say(text):
        with open(str(paths[sid]), "a") as f:
            f.write(line(dict(cc_cl_user("r%d" % time.monotonic_ns(), "2026-06-01T10:00:00.000Z", text),
                              sessionId=sid, cwd="/home/dev/a")))
    assert search_ids(capsys, "routine") != []
    (running / "4242.json").write_text(json.dumps({"pid": 4242, "sessionId": sid, "cwd": "/home/dev/a",
                                                   "kind": "interactive", "entrypoint": "sdk-cli"}))
    (running / "4243.json").write_text("{not json")     # (half written: skipped)
    say("resumed headless: the okapi plan")
    assert search_ids(capsys, "okapi") == [sid]
    say("still running: the tapir plan")                 # the folder unchanged: still compared
    assert search_ids(capsys, "tapir") == [sid]
    say("last words: the dugong plan")
    (running / "4242.json").unlink()                     # the process ends
    assert search_ids(capsys, "dugong") == [sid]
    other = list(paths)[4]                               # no process runs it: left to the sweep
    with open(str(paths[other]), "a") as f:
        f.write(line(dict(cc_cl_user("q1", "2026-06-01T10:00:00.000Z", "the quoll plan"), sessionId=other,
                          cwd="/home/dev/a")))
    del counted_stats[:]
    assert search_ids(capsys, "quoll") == []
    assert str(paths[other]) not in counted_stats


@pytest.mark.parametrize("stamp", ["updated_at_ms", "updated_at"])
def test_a_codex_session_resumed_headless_is_found_by_the_next_search_from_any_folder(env, capsys, monkeypatch,
                                                                                      tmp_path, counted_stats, stamp):
    """`codex exec resume ID` adds nothing to history.jsonl; Codex 0.16x stamps the thread's row of
    ~/.codex/state_5.sqlite (threads.updated_at_ms; an older store has updated_at, in seconds, only)
    at every turn, whatever runs it. When that store changed, a search compares the sessions stamped
    since the last one."""
    root, journal, paths, entry = _journal_home(tmp_path, "codex")
    db = tmp_path / "home" / ".codex" / "state_5.sqlite"
    con = sqlite3.connect(str(db), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")   # as Codex keeps it: commits go to the -wal file
    con.execute("CREATE TABLE threads (id TEXT PRIMARY KEY, rollout_path TEXT NOT NULL, cwd TEXT NOT NULL, "
                "updated_at INTEGER NOT NULL%s)" % (", updated_at_ms INTEGER" if stamp == "updated_at_ms" else ""))
    con.executemany("INSERT INTO threads (id, rollout_path, cwd, updated_at) VALUES (?, ?, '/home/dev/a', 1767261600)",
                    [(sid, str(path)) for sid, path in paths.items()])
    if stamp == "updated_at_ms":
        con.execute("UPDATE threads SET updated_at_ms = updated_at * 1000")
    (tmp_path / "home" / ".codex" / "state_4.sqlite").write_text("an older release's store")   # (not read)
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)   # the sweep reaches nothing
    monkeypatch.chdir(tmp_path)                                       # a folder of no session
    assert search_ids(capsys, "routine") != []                        # (the store first seen)
    for n, sid in enumerate(list(paths)[2:5]):
        with open(str(paths[sid]), "a") as f:   # the thread resumed by `codex exec resume`...
            f.write(line(cc_cx_msg("2026-06-01T10:00:00.000Z", "user", "resumed: the kinkajou%d plan" % n)))
        con.execute("UPDATE threads SET %s = ?, cwd = '/home/dev/b' WHERE id = ?" % stamp,
                    ((1780000000 + n) * (1000 if stamp == "updated_at_ms" else 1), sid))   # ...and its row stamped
        assert search_ids(capsys, "kinkajou%d" % n) == [sid]
    other = list(paths)[0]                      # written, but not stamped: left to the sweep
    with open(str(paths[other]), "a") as f:
        f.write(line(cc_cx_msg("2026-06-01T10:00:00.000Z", "user", "the margay plan")))
    del counted_stats[:]
    assert search_ids(capsys, "margay") == []
    assert str(paths[other]) not in counted_stats
    con.close()
    # a newer release's store that is not what this reads (or is damaged): searches go on, in silence
    (tmp_path / "home" / ".codex" / "state_6.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    for _ in range(2):
        code, out, err = run(capsys, "search", "kinkajou0", "--json")
        assert code == 0 and err == "" and [r["sessionId"] for r in json.loads(out)["results"]] == [list(paths)[2]]


def test_a_codex_state_store_busy_when_searched_is_read_by_the_next_search(env, capsys, monkeypatch, tmp_path):
    """A store held locked (another process writing it, exclusively) is not waited for: the search
    goes on without it, and the next one reads it (its time has not changed since: no matter)."""
    root, journal, paths, entry = _journal_home(tmp_path, "codex")
    db = tmp_path / "home" / ".codex" / "state_5.sqlite"
    con = sqlite3.connect(str(db), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE threads (id TEXT PRIMARY KEY, updated_at INTEGER NOT NULL, updated_at_ms INTEGER)")
    con.executemany("INSERT INTO threads VALUES (?, 1767261600, 1767261600000)", [(sid,) for sid in paths])
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.chdir(tmp_path)
    assert search_ids(capsys, "routine") != []
    sid = list(paths)[1]
    with open(str(paths[sid]), "a") as f:
        f.write(line(cc_cx_msg("2026-06-01T10:00:00.000Z", "user", "resumed: the civet plan")))
    con.execute("PRAGMA locking_mode=EXCLUSIVE")   # stamped by a writer that keeps the store: no
    con.execute("UPDATE threads SET updated_at_ms = 1780000000000 WHERE id = ?", (sid,))   # reader gets in
    mtime = sesame._mark_time(str(db))
    code, out, err = run(capsys, "search", "civet", "--json")
    assert code == 0 and err == "" and json.loads(out)["results"] == []
    con.execute("PRAGMA locking_mode=NORMAL")      # let go, unchanged: the time the search saw
    con.execute("SELECT count(*) FROM threads").fetchone()
    assert sesame._mark_time(str(db)) == mtime
    assert search_ids(capsys, "civet") == [sid]
    con.close()


def agent_starts(folder, lock):
    """What pi (0.73.1) and Gemini CLI (0.61.0) do at every start: a file of their folder is locked
    and released (proper-lockfile makes and removes `<file>.lock`: pi's auth.json, Gemini's
    projects.json), which changes the folder's time. Qwen Code (0.15.10, lock None) points the
    `latest` link of its debug folder at the new run's log."""
    if lock is None:
        os.remove(os.path.join(str(folder), "latest"))
        os.symlink("run-%d.txt" % time.monotonic_ns(), os.path.join(str(folder), "latest"))
        return
    if lock.endswith(".db"):   # a database the agent writes at every turn: the Cline SDK's (4.1.13)
        db = os.path.join(str(folder), lock)   # sessions.db, OpenCode's opencode.db (for omo)
        if not os.path.exists(db):
            write_file(os.path.join(str(folder), "other.txt"), "x")
            return
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE IF NOT EXISTS turns (at INTEGER)")
        con.execute("INSERT INTO turns VALUES (?)", (time.time_ns(),))
        con.commit()
        con.close()
        return
    os.mkdir(os.path.join(str(folder), lock + ".lock"))
    os.rmdir(os.path.join(str(folder), lock + ".lock"))


def _started_home(tmp_path, capsys, monkeypatch, agent, n=12):
    """n old sessions of `agent` (pi, gemini, qwen) in its own folders, with the file it locks at start,
    indexed and aged; the sweep reaches nothing and searches run from a folder of no session.
    Returns (the folder whose time a start changes, the file locked, [paths], append(path, text))."""
    if agent == "pi":
        folder, lock = tmp_path / "home" / ".pi" / "agent", "auth.json"
        root = folder / "sessions"
        paths = [PiWriter(root, "old-%02d" % i, cwd="/home/dev/a").user("routine question %d" % i).save()
                 for i in range(n)]
        append = append_user
    elif agent == "cline":
        folder, lock = tmp_path / "home" / ".cline" / "data" / "db", "sessions.db"
        root = folder.parent / "sessions"
        paths = []
        for i in range(n):
            sid = "old-%02d" % i
            write_file(root / sid / (sid + ".json"), json.dumps({"session_id": sid, "cwd": "/home/dev/a",
                                                                 "started_at": "2026-01-01T10:00:00.000Z"}))
            paths.append(write_file(root / sid / (sid + ".messages.json"), json.dumps({"sessionId": sid, "messages": [
                {"id": "u1", "role": "user", "ts": 1767261600000, "content": [{"type": "text", "text": '<user_input mode="act">routine question %d</user_input>' % i}]}]})))
        folder.mkdir(parents=True)
        con = sqlite3.connect(str(folder / lock))
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE sessions (session_id TEXT PRIMARY KEY, status TEXT, updated_at INTEGER)")
        con.executemany("INSERT INTO sessions VALUES (?, 'completed', 0)", [(os.path.basename(os.path.dirname(p)),) for p in paths])
        con.commit()
        con.close()

        def append(path, text):   # in place, as writeFileSync does
            data = json.loads(open(path).read())
            data["messages"].append({"id": "u%d" % time.monotonic_ns(), "role": "user", "ts": 1780000000000,
                                     "content": [{"type": "text", "text": '<user_input mode="act">%s</user_input>' % text}]})
            with open(path, "w") as f:
                f.write(json.dumps(data))
        paths = [str(p) for p in paths]
    elif agent == "omo":   # oh-my-opencode's transcripts, written as OpenCode writes its database
        folder, lock = tmp_path / "home" / ".local" / "share" / "opencode", "opencode.db"
        root = tmp_path / "home" / ".claude" / "transcripts"
        paths = [write_jsonl(root / ("ses_old-%02d.jsonl" % i), [
            {"type": "user", "timestamp": "2026-01-01T10:00:00.000Z", "content": "routine question %d" % i}])
            for i in range(n)]

        def append(path, text):
            with open(path, "a") as f:
                f.write(line({"type": "user", "timestamp": "2026-06-01T10:00:00.000Z", "content": text}))
        folder.mkdir(parents=True)
        sqlite3.connect(str(folder / lock)).close()
    elif agent.startswith("qwen"):   # 0.15: the debug log's link; 0.24: the extension store's lock
        folder, lock = (tmp_path / "home" / ".qwen" / "debug", None) if agent == "qwen-0.15" else \
            (tmp_path / "home" / ".qwen" / "extension-store", "lock")
        root = folder.parent / "projects"
        paths = [str(write_jsonl(root / "-home-dev-a" / "chats" / ("old-%02d.jsonl" % i), [
            dict(ot_q("u1", None, "user", message={"role": "user", "parts": [{"text": "routine question %d" % i}]}),
                 sessionId="old-%02d" % i)])) for i in range(n)]

        def append(path, text):
            with open(path, "a") as f:
                f.write(line(dict(ot_q("u2", "u1", "user", message={"role": "user", "parts": [{"text": text}]}),
                                  sessionId=os.path.basename(path)[:-len(".jsonl")])))
    else:
        folder, lock = tmp_path / "home" / ".gemini", "projects.json"
        root = folder / "tmp"
        paths = [str(write_jsonl(root / "a" / "chats" / ("session-2026-01-%02dT10-00-old-%02d.jsonl" % (i + 1, i)), [
            dict(ogc_GEMINI_META, sessionId="old-%02d" % i, startTime="2026-01-%02dT10:00:00.000Z" % (i + 1)),
            {"id": "u0", "timestamp": "2026-01-%02dT10:00:01Z" % (i + 1), "type": "user",
             "content": [{"text": "routine question %d" % i}]}])) for i in range(n)]

        def append(path, text):
            with open(path, "a") as f:
                f.write(line({"id": "u%d" % time.monotonic_ns(), "timestamp": "2026-06-01T10:00:00Z", "type": "user",
                              "content": [{"text": text}]}))
    if lock and lock.endswith(".db"):
        pass   # (made above)
    elif lock:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / lock).write_text("{}")
    else:   # Qwen Code: its debug folder, the link to the newest run's log
        folder.mkdir(parents=True)
        (folder / "first-run.txt").write_text("log")
        os.symlink("first-run.txt", str(folder / "latest"))
    if agent == "qwen-0.24":   # a link left by 0.15 before the upgrade: never moves again
        (folder.parent / "debug").mkdir()
        (folder.parent / "debug" / "old-run.txt").write_text("log")
        os.symlink("old-run.txt", str(folder.parent / "debug" / "latest"))
    write_config({"sources": [{"parser": agent.split("-")[0], "path": str(root)}]}, tmp_path)
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.chdir(tmp_path)
    assert search_ids(capsys, "routine") != []
    return folder, lock, paths, append


def test_a_start_mark_that_is_a_database_kept_open_moves_with_its_write_ahead_log(tmp_path):
    """VS Code keeps the Cline SDK's sessions.db open for days: a turn's commit changes only its -wal file."""
    db = write_file(tmp_path / "db" / "sessions.db", "x")
    os.utime(str(db), (1.7e9, 1.7e9))
    assert sesame._mark_time(str(db)) == 1.7e18
    write_file(tmp_path / "db" / "sessions.db-wal", "commit")
    assert sesame._mark_time(str(db)) == os.stat(str(db) + "-wal").st_mtime_ns > 1.7e18


@pytest.mark.parametrize("agent", ["pi", "gemini", "qwen-0.15", "qwen-0.24", "cline", "omo"])
def test_a_resumed_old_session_of_an_agent_without_journal_is_found_at_once_after_its_start(
        env, capsys, monkeypatch, tmp_path, counted_stats, agent):
    """pi, Gemini CLI, Qwen Code and the Cline SDK keep no prompt history naming sessions; their start
    (a lock on a file of their folder, a link made again, the session's row set running in Cline's
    sessions.db) opens a window in which each search compares every file of theirs, closed once a
    quiet file (the resumed one) has been read."""
    folder, lock, paths, append = _started_home(tmp_path, capsys, monkeypatch, agent)
    for word, i in (("wombat", 3), ("pangolin", 7), ("axolotl", 10)):
        time.sleep(0.01)
        agent_starts(folder, lock)        # the agent starts, resuming an old session...
        assert search_ids(capsys, word) == []   # (a search before its first prompt)
        append(paths[i], "resumed: the %s plan" % word)   # ...and the user writes to it
        assert [s.replace("ses_", "") for s in search_ids(capsys, word)] == ["old-%02d" % i]
        del counted_stats[:]
        assert search_ids(capsys, "routine") != []
        # the window closed: the quiet files are left to the sweep again (the resumed ones are active)
        assert set(counted_stats) <= {paths[j] for j in (3, 7, 10)}
    append(paths[5], "changed by something else: the dingo note")   # no start: not seen at once
    assert search_ids(capsys, "dingo") == []
    (folder / (lock or "latest")).unlink()                             # not the agent's folder: no window
    if lock:
        agent_starts(folder, lock)
    else:
        (folder / "other.txt").write_text("x")
    append(paths[6], "the quoll line")
    assert search_ids(capsys, "quoll") == []


def test_a_resumed_old_kimi_session_is_found_once_its_projects_prompt_history_grows(env, capsys, monkeypatch,
                                                                                    tmp_path, counted_stats):
    """kimi-cli's shell appends every prompt to ~/.kimi/user-history/<md5 of the work dir>.jsonl:
    when one grows, the sessions of that work dir (sessions/<md5>/) are compared, those only."""
    home = tmp_path / "home"
    paths = {}
    for cwd in ("/home/u/a", "/home/u/b"):
        for i in range(3):
            sid = "%s-%d" % (cwd[-1], i)
            paths[sid] = str(ot_kimi_cli_session(home, [("TurnBegin", {"user_input": "routine kimi question"})],
                                                 cwd=cwd, sid=sid))
    history = home / ".kimi" / "user-history"
    history.mkdir()
    for cwd in ("/home/u/a", "/home/u/b"):
        write_jsonl(history / (hashlib.md5(cwd.encode()).hexdigest() + ".jsonl"), [{"content": "routine kimi question"}])
    write_config({"sources": [{"parser": "kimi", "path": str(home / ".kimi" / "sessions")}]}, tmp_path)
    age(home)
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)   # the sweep reaches nothing
    monkeypatch.chdir(tmp_path)                                       # a folder of no session
    assert len(search_ids(capsys, "routine")) == 6

    def resume(sid, words):
        with open(paths[sid], "a") as f:
            f.write(line({"timestamp": 1795484200.5, "message": {"type": "TurnBegin", "payload": {"user_input": words}}}))
        with open(str(history / (hashlib.md5(("/home/u/" + sid[0]).encode()).hexdigest() + ".jsonl")), "a") as f:
            f.write(line({"content": words}))
    resume("b-1", "resumed: the okapi question")
    del counted_stats[:]
    assert search_ids(capsys, "okapi") == ["b-1"]
    assert {p for p in counted_stats if p in paths.values()} == {paths["b-%d" % i] for i in range(3)}
    with open(paths["a-2"], "a") as f:   # written without a prompt in the shell: left to the sweep
        f.write(line({"timestamp": 1795484300.5, "message": {"type": "TurnBegin", "payload": {"user_input": "the tapir"}}}))
    assert search_ids(capsys, "tapir") == []
    resume("a-0", "resumed: the ocelot question")
    assert search_ids(capsys, "ocelot") == ["a-0"]


def test_on_a_slow_disk_an_agents_start_is_followed_a_bounded_share_at_a_time(env, capsys, monkeypatch, tmp_path,
                                                                               counted_stats):
    """Where comparing every file takes too long (a slow disk, a huge history), each search compares
    what fits in START_PASS_SECONDS (at least SWEEP_MIN_FILES) and the next goes on from there."""
    folder, lock, paths, append = _started_home(tmp_path, capsys, monkeypatch, "pi")
    monkeypatch.setattr(sesame, "START_PASS_SECONDS", 0)
    monkeypatch.setattr(sesame, "SWEEP_MIN_FILES", 4)
    agent_starts(folder, lock)
    append(paths[-1], "resumed: the marmot list")
    found = []
    for _ in range(3):   # 12 files, 4 a search
        del counted_stats[:]
        found.append(search_ids(capsys, "marmot"))
        assert len(counted_stats) == 4 + ("old-11" in found[-1])   # its share (and the file it reads)
        if found[-1]:
            break
    assert found[-1] == ["old-11"]


def test_sesames_own_records_nested_too_deeply_are_read_as_unusable_not_a_crash(env, capsys, tmp_path):
    """Every JSON reader catches what the line readers catch (BAD_JSON): a document nested deeper
    than Python's recursion limit raises RecursionError, not ValueError. Sesame's own records then
    read as unusable: the journals' places and a file's checkpoint are made anew, an unrecognised
    record count is left out of status, and a forgotten list says which file to fix."""
    root, journal, paths, entry = _journal_home(tmp_path, "claude")
    assert run(capsys, "index")[0] == 0
    deep = "[" * 100000
    (tmp_path / "data" / "journals").write_text(deep)
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    con.execute("UPDATE files SET checkpoint=?, unknown=?", (deep, deep))
    con.commit()
    con.close()
    sid = list(paths)[2]
    with open(str(paths[sid]), "a") as f:
        f.write(line(dict(cc_cl_user("r1", "2026-06-01T10:00:00.000Z", "resumed: the quokka plan"), sessionId=sid,
                          cwd="/home/dev/a")))
    with open(str(journal), "a") as f:
        f.write(entry(sid))
    assert search_ids(capsys, "quokka") == [sid]
    code, _, err = run(capsys, "status")
    assert code == 0, err
    (tmp_path / "data" / "forgotten.json").write_text(deep)
    code, _, err = run(capsys, "forget", "--list")
    assert code == 1 and one_line_error(err) and "forgotten.json" in err, err


def test_a_journal_line_still_being_written_is_read_once_complete(env, capsys, monkeypatch, tmp_path):
    root, journal, paths, entry = _journal_home(tmp_path, "claude")
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "routine") != []
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    monkeypatch.chdir(tmp_path)
    sid = list(paths)[4]
    half = len(entry(sid)) // 2
    with open(str(journal), "a") as f:
        f.write(entry(sid)[:half])              # the agent is writing its line
    assert search_ids(capsys, "routine") != []
    with open(str(paths[sid]), "a") as f:
        f.write(line(dict(cc_cl_user("r1", "2026-06-01T10:00:00.000Z", "resumed: the axolotl plan"), sessionId=sid,
                          cwd="/home/dev/a")))
    with open(str(journal), "a") as f:
        f.write(entry(sid)[half:])
    assert search_ids(capsys, "axolotl") == [sid]


def test_a_journal_trimmed_or_replaced_is_read_again_from_its_tail(env, capsys, monkeypatch, tmp_path):
    root, journal, paths, entry = _journal_home(tmp_path, "codex")
    age(tmp_path / "home")
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "routine") != []
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)
    sid = list(paths)[3]
    with open(str(paths[sid]), "a") as f:
        f.write(line(cc_cx_msg("2026-06-01T10:00:00.000Z", "user", "resumed: the beluga plan")))
    with open(str(journal), "w") as f:          # Codex trims its history: a shorter file, newest last
        f.write(entry(sid))
    assert search_ids(capsys, "beluga") == [sid]


def test_a_deleted_session_file_is_seen_by_the_next_search(history, capsys):
    os.remove(history[21])
    code, out, _ = run(capsys, "search", "number 21", "--json")
    assert [(r["sessionId"], r["fileDeleted"]) for r in json.loads(out)["results"]][0] == ("old-21", True)


def test_an_old_file_edited_in_place_is_seen_within_the_sweep_and_at_once_by_index(history, capsys):
    for path, word in ((history[5], "pelican"), (history[6], "flamingo")):
        text = open(path).read().replace("routine things", word + " things!")
        with open(path, "w") as f:
            f.write(text)
        os.utime(os.path.dirname(path), (time.time() - 86400 * 30,) * 2)   # the folder looks untouched
    assert ["old-05"] in [search_ids(capsys, "pelican") for _ in range(9)]
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "flamingo", "--no-refresh") == ["old-06"]


def test_two_parsers_on_one_folder_keep_their_own_files_through_search_sweep_and_index(env, tmp_path, capsys, monkeypatch):
    # The README's way to reach project-folder histories: two parsers on one root (and a nested
    # root of one of them). Each source's listing, folder times and checks are its own: a search
    # after a change under the root must not take one parser's files for the other's, or for gone.
    monkeypatch.setattr(sesame, "SWEEP_SECONDS", 0)
    code = tmp_path / "home" / "code"
    write_file(code / "app" / ".aider.chat.history.md", am_AIDER_HISTORY)
    am_crush_db(code / "kdl" / ".crush" / "crush.db")
    write_config({"sources": [{"parser": "aider", "path": str(code)}, {"parser": "crush", "path": str(code)},
                              {"parser": "aider", "path": str(code / "app")}]}, tmp_path)
    age(code)
    assert run(capsys, "index")[0] == 0
    assert search_ids(capsys, "uploader") != []            # the sweep checks every file with its own parser
    assert json.loads(run(capsys, "status", "--json")[1])["notIndexed"] == []
    write_file(code / "notes.txt", "anything")           # the root folder's time changes
    for _ in range(3):                                     # the refresh, then the sweep over every file
        assert search_ids(capsys, "uploader") != [] and search_ids(capsys, "lexer") != []
    info = json.loads(run(capsys, "status", "--json")[1])
    assert info["notIndexed"] == [] and info["files"] == 2
    assert {a["agent"]: a["sessions"] for a in info["perAgent"]} == {"aider": 2, "crush": 2}
    code_, out, _ = run(capsys, "index", "--json")
    assert code_ == 0 and json.loads(out)["filesRemoved"] == 0 and json.loads(out)["filesSkipped"] == 0
    assert search_ids(capsys, "uploader", "--no-refresh") != [] and search_ids(capsys, "lexer", "--no-refresh") != []


def test_a_file_whose_first_source_leaves_the_config_belongs_to_the_next_and_its_deletion_is_seen(env, tmp_path, capsys):
    code = tmp_path / "home" / "code"
    history = write_file(code / "app" / ".aider.chat.history.md", am_AIDER_HISTORY)
    write_config({"sources": [{"parser": "aider", "path": str(code / "app")}, {"parser": "aider", "path": str(code)}]},
                 tmp_path)
    assert run(capsys, "index")[0] == 0
    write_config({"sources": [{"parser": "aider", "path": str(code)}]}, tmp_path)   # the nested source goes
    assert run(capsys, "index")[0] == 0
    os.remove(str(history))
    code_, out, _ = run(capsys, "search", "uploader", "--json")
    assert [r["fileDeleted"] for r in json.loads(out)["results"]] == [True]


def test_watch_reports_a_failed_round_backs_off_and_goes_on(env, capsys, monkeypatch):
    good_session(env)
    rounds, sleeps = [], []
    real = sesame.refresh_index

    def flaky(ctx, store, wait_seconds, **kw):
        rounds.append(1)
        if len(rounds) <= 2:
            raise sqlite3.OperationalError("database or disk is full")
        return real(ctx, store, wait_seconds, **kw)

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) >= 4:
            raise KeyboardInterrupt
    monkeypatch.setattr(sesame, "refresh_index", flaky)
    monkeypatch.setattr(sesame.time, "sleep", sleep)
    code, out, err = run(capsys, "watch", "--interval", "1")
    assert code == 0 and len(rounds) == 4 and "disk is full" in err and "Traceback" not in err
    assert sleeps[:3] == [2, 4, 1]   # longer after each failure, the normal interval once it works
    assert search_ids(capsys, "pangolin", "--no-refresh") == ["good-1"]


def test_a_search_while_another_process_builds_the_first_index_waits_then_says_partial(env, capsys, monkeypatch):
    good_session(env)
    store = sesame.Store.open(str(env.parent / "data" / "index.sqlite"))   # an index not built yet
    store.close()
    lock = sesame.IndexLock(str(env.parent / "data"))
    assert lock.acquire(0)
    monkeypatch.setattr(sesame, "FIRST_INDEX_WAIT", 0.3)
    try:
        code, out, err = run(capsys, "search", "pangolin", "--json")
    finally:
        lock.release()
    assert code == 0 and "building the index" in err and "partial" in err
    assert search_ids(capsys, "pangolin") == ["good-1"]   # the lock is free: the search builds it


def test_the_mcp_server_keeps_the_index_fresh_between_calls(history, capsys, monkeypatch):
    import threading
    append_user(history[13], "edited while the server ran: the okapi plan")
    stop = threading.Event()
    worker = threading.Thread(target=sesame._keep_fresh, args=(stop, 0.05), daemon=True)
    worker.start()
    try:
        for _ in range(100):
            if search_ids(capsys, "okapi", "--no-refresh"):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(5)
    assert search_ids(capsys, "okapi", "--no-refresh") == ["old-13"]


def read_starts(monkeypatch):
    """Record the byte offsets the indexer starts reading JSONL files from."""
    starts = []
    original = sesame.iter_jsonl

    def spy(path, report, start=0):
        starts.append((os.path.basename(path), start))
        return original(path, report, start)
    monkeypatch.setattr(sesame, "iter_jsonl", spy)
    return starts


def parse_starts(monkeypatch):
    """(file name, offset) each parse of a file starts from: 0 when it reads the file whole."""
    starts = []
    original = sesame.parse_file

    def spy(path, parser_id, resume, limit, redact_secrets=True):
        result = original(path, parser_id, resume, limit, redact_secrets)
        starts.append((os.path.basename(path), 0 if resume is None or result.restarted else resume["offset"]))
        return result
    monkeypatch.setattr(sesame, "parse_file", spy)
    return starts


def check_appends_are_resumed(tmp_path, capsys, monkeypatch, parser, root, path, head, kept, turns, old, new):
    """The freshness promise for a resumable parser, on the user's side: each append (`turns`: (a word
    only it has, its records)) is read from where the last read stopped, after the head's first `kept`
    records (a first turn long enough to count); an append cut inside a line is read once
    finished; what the index holds equals a full rebuild; a rewrite (`old` -> `new` in the head)
    reads the file whole."""
    write_config({"sources": [{"parser": parser, "path": str(root)}]}, tmp_path)
    write_jsonl(path, head)
    assert run(capsys, "index")[0] == 0
    sid = search_ids(capsys, old)[0]
    starts = parse_starts(monkeypatch)
    first_turn = sum(len(json.dumps(r)) + 1 for r in head[:kept])
    for i, (word, records) in enumerate(turns):
        size = os.path.getsize(path)
        text = "".join(json.dumps(r) + "\n" for r in records)
        if i == 1:   # an agent caught writing: half a line now, the rest at the next read
            with open(path, "a") as f:
                f.write(text[:len(text) // 2])
            assert run(capsys, "index")[0] == 0
            text, size = text[len(text) // 2:], os.path.getsize(path)
        with open(path, "a") as f:
            f.write(text)
        del starts[:]
        assert run(capsys, "index")[0] == 0
        [(name, offset)] = starts
        assert name == os.path.basename(path) and first_turn <= offset <= size
        assert search_ids(capsys, word) == [sid]
    shown = show_json(capsys, sid, "--max-chars", "0", "--all")
    assert run(capsys, "index", "--full")[0] == 0
    assert show_json(capsys, sid, "--max-chars", "0", "--all") == shown
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace(old, new))
    del starts[:]
    assert run(capsys, "index")[0] == 0
    assert starts == [(os.path.basename(path), 0)]
    assert search_ids(capsys, new) == [sid] and search_ids(capsys, old) == []
    return shown


def test_gemini_appends_are_read_from_the_last_message_and_a_rewind_reads_the_file_again(env, tmp_path, capsys,
                                                                                        monkeypatch):
    chats = tmp_path / "home" / ".gemini" / "tmp" / "proj" / "chats"
    path = str(chats / "session-2026-04-29T21-39-g1.jsonl")
    filler = " ".join("word%d" % i for i in range(400))
    head = [ogc_GEMINI_META,
            {"id": "u1", "timestamp": "2026-04-29T21:39:30Z", "type": "user", "content": "plan the gazebo " + filler},
            {"id": "a1", "timestamp": "2026-04-29T21:39:31Z", "type": "gemini", "content": "first " + filler},
            {"id": "u2", "timestamp": "2026-04-29T21:40:00Z", "type": "user", "content": "and the roof"},
            {"$set": {"lastUpdated": "2026-04-29T21:40:00Z"}}]
    call = {"id": "t1", "name": "run_shell_command", "args": {"command": "ls shed"}, "status": "success",
            "result": [{"functionResponse": {"id": "t1", "response": {"output": "shed.txt"}}}]}
    turns = [
        ("trellis", [{"id": "a2", "timestamp": "2026-04-29T21:40:01Z", "type": "gemini", "content": "partial"},
         {"id": "a2", "timestamp": "2026-04-29T21:40:02Z", "type": "gemini", "content": "the trellis is done",
          "toolCalls": [call]},
         {"id": "r2", "timestamp": "2026-04-29T21:40:03Z", "type": "user", "content": [
             {"functionResponse": {"id": "t1", "response": {"output": "shed.txt"}}}]},
         {"$set": {"lastUpdated": "2026-04-29T21:40:03Z", "summary": "Garden build"}}]),
        ("pergola", [{"id": "u3", "timestamp": "2026-04-29T21:41:00Z", "type": "user", "content": "paint the pergola"}]),
        (None, [{"id": "u4", "timestamp": "2026-04-29T21:42:00Z", "type": "user", "content": "abandoned question"},
         {"$rewindTo": "a2"},   # rewinds what an earlier read indexed: read again from the start
         {"id": "u5", "timestamp": "2026-04-29T21:43:00Z", "type": "user", "content": "water the hedge"}]),
    ]
    shown = check_appends_are_resumed(tmp_path, capsys, monkeypatch, "gemini", chats.parent.parent, path, head, 3,
                                      turns[:2], "gazebo", "pavilion")
    texts_shown = [c["text"] for c in shown["chunks"]]
    assert sum("shed.txt" in t for t in texts_shown) == 1 and "paint the pergola" in texts_shown
    assert shown["session"]["name"] == "Garden build"
    starts = parse_starts(monkeypatch)
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in turns[2][1]))
    assert run(capsys, "index")[0] == 0
    assert starts == [(os.path.basename(path), 0)]
    assert search_ids(capsys, "trellis") == search_ids(capsys, "pergola") == [] and search_ids(capsys, "hedge") == ["g-1"]


def codex_turn(n, prompt, answer=None, call=None, turn_start=True, bare=False, events=True):
    """The lines of one Codex turn (`n` makes its times and ids): wrapped (turn_context first, or none
    as in older and generated rollouts; `events`: the event_msg copies, which generated rollouts may
    leave out), or bare-era items."""
    ts = "2025-11-17T21:%02d:%02d.000Z" % (30 + n // 60, n % 60)
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}]
    if call:
        items += [{"type": "function_call", "name": "shell", "call_id": "call_%d" % n,
                   "arguments": json.dumps({"command": ["bash", "-lc", call[0]]})},
                  {"type": "function_call_output", "call_id": "call_%d" % n,
                   "output": json.dumps({"output": call[1], "metadata": {"exit_code": 0}})}]
    if answer:
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]})
    if bare:
        return items + [{"record_type": "state"}]
    lines = [cc_cx(ts, "turn_context", {"cwd": "/home/u/app", "model": "gpt-5"})] if turn_start else []
    lines += [cc_cx(ts, "response_item", items[0])]
    lines += [cc_cx(ts, "event_msg", {"type": "user_message", "message": prompt})] if events else []
    for item in items[1:]:
        lines.append(cc_cx(ts, "response_item", item))
        if item.get("role") == "assistant" and events:
            lines.append(cc_cx(ts, "event_msg", {"type": "agent_message", "message": answer}))
    return lines


def test_codex_prompts_waiting_for_their_copies_pair_by_text_and_stream(tmp_path):
    """Codex writes each typed prompt twice (event_msg and response_item); a prompt pairs with its
    earliest waiting copy from the other stream, and the ones waiting before it get none any more.
    Found by text and stream (a file of 20,000 prompts in one stream took 17 s to read when each
    looked through all those waiting): 3,000 prompts in one stream, then their copies, then a prompt
    typed again whose copy follows, give each prompt once."""
    n = 3000
    lines = [cc_cx_meta()]
    lines += [cc_cx("2025-11-17T21:30:00.000Z", "event_msg", {"type": "user_message", "message": "prompt %d" % i})
              for i in range(n)]
    lines += [cc_cx("2025-11-17T21:31:00.000Z", "response_item", {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "prompt %d" % i}]}) for i in range(n)]
    lines += [cc_cx("2025-11-17T21:32:00.000Z", "event_msg", {"type": "user_message", "message": "prompt 7"}),
              cc_cx("2025-11-17T21:32:00.000Z", "response_item", {"type": "message", "role": "user", "content": [
                  {"type": "input_text", "text": "prompt  7"}]})]   # (compared without white space)
    path = write_jsonl(cc_rollout(tmp_path), lines)
    [s] = sesame.PARSERS["codex"].parse(str(path), sesame.ParseReport())
    said = collections.Counter("".join(c.text.split()) for c in s.chunks if c.kind == "user")
    assert len(said) == n and all(said["prompt%d" % i] == (2 if i == 7 else 1) for i in range(n))


def test_a_codex_thread_resumed_from_another_folder_is_that_folders_session(env, tmp_path, capsys):
    """`codex resume` run in another folder goes on there: Codex 0.169 writes the new folder in the
    next turns' context and moves the thread to it in its state store (recorded with the real CLI).
    The session's folder follows, when the append is read on from the last turn as when the file is
    read whole; a fork's replayed parent context does not move it."""
    root = tmp_path / "codex-sessions"
    write_config({"sources": [{"parser": "codex", "path": str(root)}]}, tmp_path)
    path = cc_rollout(root)
    def turn(ts, cwd, prompt, answer):
        return [cc_cx(ts, "turn_context", {"cwd": cwd, "model": "gpt-5"}), cc_cx_msg(ts, "user", prompt),
                cc_cx(ts, "event_msg", {"type": "user_message", "message": prompt}), cc_cx_msg(ts, "assistant", answer)]
    write_jsonl(path, [cc_cx_meta(cwd="/w/first")] + turn("2025-11-17T21:31:00.000Z", "/w/first", "plan the gazebo", "planned"))
    run(capsys, "index")
    assert search_ids(capsys, "gazebo", "--cwd", "/w/first") == [cc_TID]
    with open(path, "a") as f:   # resumed in /w/second
        f.writelines(json.dumps(r) + "\n" for r in turn("2025-11-18T09:00:00.000Z", "/w/second", "paint the gazebo", "painted"))
    for _ in range(2):   # read on from the last turn, then whole
        assert search_ids(capsys, "gazebo", "--cwd", "/w/second") == [cc_TID]
        assert search_ids(capsys, "gazebo", "--cwd", "/w/first") == []
        hit = json.loads(run(capsys, "search", "paint gazebo", "--json")[1])["results"][0]
        assert hit["cwd"] == "/w/second"
        run(capsys, "index", "--full")
    fork = cc_rollout(root, name="019a93b9-f380-7600-98ff-0000000000ff")   # forked in /w/third from the thread above
    write_jsonl(fork, [cc_cx_meta(tid="019a93b9-f380-7600-98ff-0000000000ff", ts="2025-11-19T10:00:00.000Z",
                                  cwd="/w/third", forked_from_id=cc_TID),
                       cc_cx_meta(ts="2025-11-19T10:00:00.001Z", cwd="/w/first")]
               + turn("2025-11-19T10:00:00.002Z", "/w/second", "paint the gazebo", "painted"))
    run(capsys, "index")
    assert search_ids(capsys, "gazebo", "--cwd", "/w/third") == ["019a93b9-f380-7600-98ff-0000000000ff"]


@pytest.mark.parametrize("era", ["turn_context", "no turn lines", "bare", "one stream"])
def test_codex_appends_are_read_from_the_last_turn_and_a_rewrite_is_read_whole(env, tmp_path, capsys, monkeypatch, era):
    root = tmp_path / "codex-sessions"
    path = str(cc_rollout(root))
    filler = " ".join("word%d" % i for i in range(400))
    kw = {"turn_start": era == "turn_context", "bare": era == "bare", "events": era != "one stream"}
    header = {"id": cc_TID, "timestamp": "2025-11-17T21:30:00.000Z", "instructions": None} if era == "bare" else \
        cc_cx_meta()
    head = [header] + codex_turn(1, "plan the gazebo " + filler, "first " + filler, **kw) + codex_turn(
        2, "and the roof", "the roof is planned", ("ls roof", "roof.txt"), **kw)
    turns = [("trellis", codex_turn(3, "build the trellis", "the trellis is done", ("ls shed", "shed.txt"), **kw)),
             ("pergola", codex_turn(4, "paint the pergola", "painted", **kw)),
             ("hedge", codex_turn(5, "water the hedge", **kw))]
    kept = 1 + len(codex_turn(1, "x", "y", **kw))
    shown = check_appends_are_resumed(tmp_path, capsys, monkeypatch, "codex", root, path, head, kept, turns,
                                      "gazebo", "pavilion")
    said = [c["text"] for c in shown["chunks"]]
    for text in ("build the trellis", "the trellis is done", "paint the pergola", "water the hedge"):
        assert said.count(text) == 1, text   # each text once, though the wrapped eras write it twice
    assert sum("shed.txt" in t for t in said) == 1


def test_qwen_appends_are_read_from_the_last_record_and_a_late_fragment_reads_the_file_again(env, tmp_path, capsys,
                                                                                          monkeypatch):
    root = tmp_path / "qwen-projects"
    path = str(root / "proj" / "chats" / (ot_SID + ".jsonl"))
    filler = " ".join("word%d" % i for i in range(400))

    def user(uuid, text):
        return ot_q(uuid, None, "user", message={"role": "user", "parts": [{"text": text}]})

    def model(uuid, text, call=None):
        parts = [{"text": text}] + ([{"functionCall": {"id": call, "name": "run_shell_command",
                                                        "args": {"command": "ls shed"}}}] if call else [])
        return ot_q(uuid, None, "assistant", message={"role": "model", "parts": parts})

    head = [user("u1", "plan the gazebo " + filler), model("a2", "first " + filler), user("u3", "and the roof"),
            ot_q("s4", None, "system", subtype="custom_title", systemPayload={"customTitle": "Garden build"})]
    turns = [("trellis", [model("a5", "the trellis is done", call="c5"),
                          ot_q("r6", None, "tool_result", message={"role": "user", "parts": [{"functionResponse": {
                              "id": "c5", "name": "run_shell_command", "response": {"output": "shed.txt"}}}]})]),
             ("pergola", [user("u7", "paint the pergola")]),
             ("hedge", [model("a8", "water the hedge")])]
    shown = check_appends_are_resumed(tmp_path, capsys, monkeypatch, "qwen", root, path, head, 2, turns,
                                      "gazebo", "pavilion")
    said = [c["text"] for c in shown["chunks"]]
    assert sum("shed.txt" in t for t in said) == 1 and shown["session"]["name"] == "Garden build"
    starts = parse_starts(monkeypatch)
    with open(path, "a") as f:   # a late fragment of a record indexed before: read again from the start
        f.write(json.dumps(ot_q("a5", None, "assistant", message={"role": "model", "parts": [
            {"text": "thinking about the arbor", "thought": True}]})) + "\n")
    assert run(capsys, "index")[0] == 0
    assert starts == [(os.path.basename(path), 0)] and search_ids(capsys, "arbor") == [ot_SID]


def index_snapshot(capsys, queries=("carousel", "webhook", "kubernetes autoscaler", "deploy bucket", "tool output")):
    """What a user sees of the index: status counts and the JSON of several searches."""
    info = json.loads(run(capsys, "status", "--json")[1])
    results = [json.loads(run(capsys, "search", q, "--json", "--no-refresh")[1]) for q in queries]
    return (info["sessions"], info["chunks"]), results


def test_appended_lines_are_read_from_where_the_last_run_stopped_and_match_a_full_rebuild(corpus, capsys, monkeypatch):
    w = PiWriter(corpus, "grow-1", cwd="/home/dev/grow")
    w.user("Set up the webhook relay.").assistant("Relay configured.")
    path = w.save()
    run(capsys, "index")
    size = os.path.getsize(path)
    starts = read_starts(monkeypatch)
    with open(path, "a") as f:
        f.write(line({"type": "session_info", "id": "n1", "parentId": None, "timestamp": "2026-03-10T09:30:00.000Z",
                      "name": "Webhook relay"}))
        f.write(line({"type": "message", "id": "n2", "parentId": "n1", "timestamp": "2026-03-10T09:31:00.000Z",
                      "message": {"role": "user", "content": "now add a tool output check", "timestamp": 1773135060000}}))
    code, out, _ = run(capsys, "index", "--json")
    assert json.loads(out)["filesIndexed"] == 1
    assert starts == [(os.path.basename(path), size)]  # only the new bytes were read
    appended = index_snapshot(capsys)
    assert search_ids(capsys, "webhook relay tool output")[0] == "grow-1"
    run(capsys, "index", "--full")
    assert index_snapshot(capsys) == appended


def test_a_pi_call_aborted_before_the_next_prompt_holds_back_appends_no_longer(env, capsys, monkeypatch):
    """pi writes no result for calls the user aborted (Esc) before typing again: the next append is
    read from the last line, not from the aborted calls, and the index is what a full read gives."""
    w = PiWriter(env, "aborted")
    w.user("tidy the marmot module").assistant("Reading it.", calls=[("c1", "read", {"path": "marmot.py"}),
                                                                    ("c2", "bash", {"command": "ls marmot"})])
    w.user("stop, rename it to the stoat module first").tool("bash", {"command": "git mv marmot.py stoat.py"}, "renamed")
    path = w.save()
    run(capsys, "index")
    starts = read_starts(monkeypatch)
    clean = os.path.getsize(path)
    with open(path, "a") as f:
        f.write(line(w.entry("message", message={"role": "assistant", "content": [{"type": "text", "text": "The ermine tests pass."}]}).lines[-1]))
    run(capsys, "index")
    assert starts == [(os.path.basename(path), clean)]
    assert search_ids(capsys, "ermine") == search_ids(capsys, "marmot.py", "--tool", "read") == ["aborted"]
    queries = ("marmot", "stoat", "ermine", "renamed")
    appended = index_snapshot(capsys, queries)
    run(capsys, "index", "--full")
    assert index_snapshot(capsys, queries) == appended


def test_each_append_is_read_from_the_last_stop_and_a_later_rewrite_is_still_noticed(env, capsys, monkeypatch):
    # The checkpoint's checksum of what was read is carried on over the appended bytes only (not
    # re-read from the start of a 20 MB file): it must still equal the checksum of the whole prefix,
    # or the next append would be read from the start, or a rewrite taken for an append.
    w = PiWriter(env, "many-appends")
    w.user("the first words about a gazebo")
    path = w.save()
    run(capsys, "index")
    starts = read_starts(monkeypatch)
    sizes = []
    for i in range(3):
        sizes.append(os.path.getsize(path))
        append_user(path, "appended note %d about a trellis" % i)
        run(capsys, "index")
    assert starts == [(os.path.basename(path), size) for size in sizes]
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace("about a gazebo", "about a pergola"))
    append_user(path, "one more note")
    del starts[:]
    run(capsys, "index")
    assert starts == [(os.path.basename(path), 0)]
    assert search_ids(capsys, "pergola") == ["many-appends"] and search_ids(capsys, "gazebo") == []
    code, out, _ = run(capsys, "show", "many-appends", "--json", "--max-chars", "0")
    assert sum("about a trellis" in c["text"] for c in json.loads(out)["chunks"]) == 3


@pytest.mark.parametrize("agent", ["pi", "claude"])
def test_a_last_record_without_its_newline_is_read_and_appends_go_on_after_it(agent, env, tmp_path, capsys, monkeypatch):
    # An agent may write a record and its newline apart (Cursor never writes the last newline): a
    # last line that is a whole JSON object is read, and the checkpoint after it is right whether
    # the newline comes alone, with the next record, or never.
    root = tmp_path / agent
    if agent == "pi":
        w = PiWriter(root, "no-newline")
        w.user("the first words about a gazebo")
        path, sid = w.save(), "no-newline"

        def record(i, word):
            return {"type": "message", "id": "m%d" % i, "parentId": None, "timestamp": "2026-03-10T09:0%d:00.000Z" % i,
                    "message": {"role": "user", "content": "note %d about a %s" % (i, word)}}
    else:
        path, sid = write_jsonl(root / "-proj" / (cc_SID + ".jsonl"),
                                [cc_cl_user("u0", "2026-01-01T00:00:00Z", "the first words about a gazebo")]), cc_SID

        def record(i, word):
            return cc_cl_user("u%d" % i, "2026-01-01T00:00:0%dZ" % i, "note %d about a %s" % (i, word))
    write_config({"sources": [{"parser": agent, "path": str(root)}]}, tmp_path)

    def append(raw):
        with open(path, "a") as f:
            f.write(raw)
        return index_json(capsys)

    def chunks():
        code, out, _ = run(capsys, "show", sid, "--json", "--max-chars", "0", "--no-refresh")
        return [c["text"] for c in json.loads(out)["chunks"]]

    assert append(json.dumps(record(1, "trellis")))["linesSkipped"] == 0
    assert search_ids(capsys, "trellis", "--no-refresh") == [sid]
    starts = read_starts(monkeypatch)
    sizes = [os.path.getsize(path)]
    append("\n")                                                    # the newline alone
    sizes.append(os.path.getsize(path))
    append(json.dumps(record(2, "pergola")))
    sizes.append(os.path.getsize(path))
    assert append("\n" + json.dumps(record(3, "wisteria")) + "\n")["linesSkipped"] == 0
    # each read went on from the end of the last record read (a newline alone adds none)
    assert [start for _, start in starts] == [sizes[0], sizes[0], sizes[2]]
    for word in ("gazebo", "trellis", "pergola", "wisteria"):
        assert search_ids(capsys, word, "--no-refresh") == [sid]
    incremental = chunks()
    assert [sum(word in text for text in incremental) for word in ("trellis", "pergola", "wisteria")] == [1, 1, 1]
    run(capsys, "index", "--full")
    assert chunks() == incremental
    append('{"type": "message", "message": {"role": "user", "content": "half written')   # not whole: not read
    assert search_ids(capsys, "half written", "--no-refresh") == []


def _iso(i):
    return "2026-05-01T10:%02d:%02d.000Z" % (i // 60, i % 60)


def _copilot_turn(i, word):
    def ev(k, etype, data):
        return {"type": etype, "data": data, "id": "e%d-%d" % (i, k), "timestamp": _iso(4 * i + k)}
    call = {"toolCallId": "c%d" % i, "toolName": "bash", "arguments": {"command": "grep -r %s" % word}}
    return [ev(0, "user.message", {"content": "question about the %s" % word}),
            ev(1, "assistant.message", {"content": "answer about the %s" % word, "reasoningText": "think %s" % word,
                                        "toolRequests": [{"toolCallId": "c%d" % i, "name": "bash",
                                                          "arguments": json.dumps(call["arguments"])}]}),
            ev(2, "tool.execution_start", call),
            ev(3, "tool.execution_complete", {"toolCallId": "c%d" % i, "success": True,
                                              "result": {"content": "found the %s" % word}})]


def _droid_turn(i, word):
    def msg(k, role, content):
        return {"type": "message", "id": "m%d-%d" % (i, k), "timestamp": _iso(3 * i + k),
                "message": {"role": role, "content": content}}
    return [msg(0, "user", [{"type": "text", "text": "question about the %s" % word}]),
            msg(1, "assistant", [{"type": "text", "text": "answer about the %s" % word},
                                 {"type": "tool_use", "id": "t%d" % i, "name": "Execute", "input": {"command": "grep %s" % word}}]),
            msg(2, "user", [{"type": "tool_result", "tool_use_id": "t%d" % i, "content": "found the %s" % word}])]


def _kimi_code_turn(i, word):
    def op(k, etype, **kw):
        return dict(type=etype, time=1777629600000 + (5 * i + k) * 1000, **kw)
    def loop(k, event):
        return op(k, "context.append_loop_event", event=event)
    return [op(0, "context.append_message", message={"role": "user", "content": [{"type": "text", "text": "question about the %s" % word}],
                                                     "origin": {"kind": "user"}}),
            loop(1, {"type": "content.part", "stepUuid": "s%d" % i, "part": {"type": "text", "text": "answer about the %s" % word}}),
            loop(2, {"type": "tool.call", "toolCallId": "k%d" % i, "name": "Bash", "args": {"command": "grep %s" % word}}),
            loop(3, {"type": "tool.result", "toolCallId": "k%d" % i, "result": {"output": "found the %s" % word}}),
            loop(4, {"type": "step.end"})]


def _kimi_cli_turn(i, word):
    def ev(k, mtype, payload):
        return {"timestamp": 1777629600 + 5 * i + k, "message": {"type": mtype, "payload": payload}}
    return [ev(0, "TurnBegin", {"user_input": "question about the %s" % word}),
            ev(1, "ContentPart", {"type": "text", "text": "answer about the %s" % word}),
            ev(2, "ToolCall", {"id": "w%d" % i, "function": {"name": "Shell", "arguments": json.dumps({"command": "grep %s" % word})}}),
            ev(3, "ToolResult", {"tool_call_id": "w%d" % i, "return_value": {"output": "found the %s" % word, "is_error": False}}),
            ev(4, "TurnEnd", {})]


def _openclaw_turn(i, word):
    def entry(k, message):
        return {"type": "message", "id": "o%d-%d" % (i, k), "timestamp": _iso(3 * i + k), "message": message}
    return [entry(0, {"role": "user", "content": "question about the %s" % word}),
            entry(1, {"role": "assistant", "content": [{"type": "text", "text": "answer about the %s" % word},
                                                       {"type": "toolCall", "id": "x%d" % i, "name": "bash",
                                                        "arguments": {"command": "grep %s" % word}}]}),
            entry(2, {"role": "toolResult", "toolCallId": "x%d" % i, "toolName": "bash",
                      "content": [{"type": "text", "text": "found the %s" % word}]})]


# agent -> (parser, folder configured, file under it, session id, header lines, one turn)
APPEND_FORMATS = {
    "copilot": ("copilot", "session-state", "sid-c/events.jsonl", "sid-c",
                [{"type": "session.start", "data": {"sessionId": "sid-c", "context": {"cwd": "/w"}}, "id": "e0",
                  "timestamp": _iso(0)}], _copilot_turn),
    "droid": ("droid", "sessions", "-w/sid-d.jsonl", "sid-d",
              [{"type": "session_start", "id": "sid-d", "sessionTitle": "Droid work", "cwd": "/w"}], _droid_turn),
    "kimi-code": ("kimi", "kimi-code", "wd_w/sid-k/agents/main/wire.jsonl", "sid-k",
                  [{"type": "metadata", "protocol_version": "1.0", "created_at": 1777629600000}], _kimi_code_turn),
    "kimi-cli": ("kimi", "kimi-sessions", "0123abcd/sid-w/wire.jsonl", "sid-w",
                 [{"type": "metadata", "protocol_version": "1.9"}], _kimi_cli_turn),
    "openclaw": ("openclaw", "agents", "main/sid-o.jsonl", "sid-o",
                 [{"type": "session", "version": 3, "id": "sid-o", "timestamp": _iso(0), "cwd": "/w"}], _openclaw_turn),
}


def _lock_beside(fmt, path):
    """What the agent does in the transcript's folder around an append, as its source shows (Copilot
    CLI 1.0.102: `inuse.<pid>.lock` made at start or resume and removed at exit; Droid 0.225: a lock
    folder `<transcript>.events.lock` renamed in and removed at every append; OpenClaw: a
    `<transcript>.lock` file made with O_EXCL and removed at every write)."""
    folder = os.path.dirname(path)
    if fmt == "copilot":
        lock = os.path.join(folder, "inuse.4242.lock")
        open(lock, "w").close()
        os.remove(lock)
    elif fmt == "droid":
        os.mkdir(path + ".events.lock")
        os.rmdir(path + ".events.lock")
    elif fmt == "kimi-code":   # state.json renamed into the session's folder, two above the wire
        session = os.path.dirname(os.path.dirname(folder))
        write_file(os.path.join(session, "state.json.tmp.42"), json.dumps({"lastPrompt": "resumed"}))
        os.replace(os.path.join(session, "state.json.tmp.42"), os.path.join(session, "state.json"))
    else:
        open(path + ".lock", "x").close()
        os.remove(path + ".lock")


@pytest.mark.parametrize("fmt", ["copilot", "droid", "openclaw", "kimi-code"])
def test_an_old_session_resumed_by_an_agent_that_locks_beside_it_is_found_at_once_from_any_folder(
        fmt, env, tmp_path, capsys, monkeypatch):
    """These agents keep no journal naming sessions, but they make and remove a lock in the session's
    folder when they write to it (Kimi Code renames its state.json there, two folders above the
    transcript): the folder's time changes, and a search lists it again."""
    parser, folder, name, sid, head, turn = APPEND_FORMATS[fmt]
    root = tmp_path / folder
    path = write_jsonl(root / name, head + turn(0, "gazebo"))
    for i in range(1, 8):   # other old sessions beside it
        other = "%s-%d" % (sid, i)
        write_jsonl(root / name.replace(sid, other), json.loads(json.dumps(head + turn(0, "gazebo")).replace(sid, other)))
    write_config({"sources": [{"parser": parser, "path": str(root)}]}, tmp_path)
    age(root)
    assert run(capsys, "index")[0] == 0
    monkeypatch.setattr(sesame, "_sweep", lambda *args, **kw: None)   # the sweep reaches nothing
    monkeypatch.chdir(tmp_path)
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in turn(1, "marmoset")))
    assert search_ids(capsys, "marmoset") == []      # an append alone changes no folder: left to the sweep
    _lock_beside(fmt, path)
    assert search_ids(capsys, "marmoset") == [sid]


@pytest.mark.parametrize("fmt", sorted(APPEND_FORMATS))
def test_appends_to_each_agents_journal_are_read_from_the_last_stop_as_a_full_read_gives_them(fmt, env, tmp_path, capsys,
                                                                                             monkeypatch):
    parser, folder, name, sid, head, turn = APPEND_FORMATS[fmt]
    root = tmp_path / folder
    path = str(root / name)
    write_config({"sources": [{"parser": parser, "path": str(root)}]}, tmp_path)
    write_jsonl(path, head + turn(0, "gazebo"))

    def append(records, raw_tail=""):
        with open(path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records) + raw_tail)

    def show():
        code, out, err = run(capsys, "show", sid, "--json", "--max-chars", "0", "--no-refresh")
        data = json.loads(out)
        head = {k: data["session"][k] for k in ("sessionId", "name", "cwd", "created", "modified", "chunkCount")}
        return head, [(c["kind"], c["tool"], c["text"]) for c in data["chunks"]]

    run(capsys, "index")
    starts = read_starts(monkeypatch)
    size = os.path.getsize(path)
    append(turn(1, "trellis"))                                      # an append: read from where the last read stopped
    run(capsys, "index")
    assert starts == [(os.path.basename(path), size)]
    assert search_ids(capsys, "trellis", "--no-refresh") == [sid]

    size = os.path.getsize(path)
    lines = [json.dumps(r) for r in turn(2, "wisteria")]
    append([], "\n".join(lines[:2]) + "\n" + lines[2][:15])          # ends in the middle of a line
    run(capsys, "index")
    assert search_ids(capsys, "question wisteria", "--no-refresh") == [sid]
    del starts[:]
    append([], lines[2][15:] + "\n" + "".join(l + "\n" for l in lines[3:]))   # the next append completes it
    append(turn(3, "pergola"))
    run(capsys, "index")
    assert len(starts) == 1 and size <= starts[0][1] < os.path.getsize(path)
    assert search_ids(capsys, "found wisteria", "--no-refresh") == [sid]
    append([], "\n".join(json.dumps(r) for r in turn(4, "magnolia")))    # a whole last record, no newline yet
    run(capsys, "index")
    assert search_ids(capsys, "found magnolia", "--no-refresh") == [sid]
    append([], "\n")
    append(turn(5, "camellia"))
    run(capsys, "index")
    incremental = show()
    assert [sum("question about the %s" % w in text for _, _, text in incremental[1])
            for w in ("wisteria", "magnolia", "camellia")] == [1, 1, 1]
    run(capsys, "index", "--full")
    assert show() == incremental                                  # what a full read of the file gives

    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:                                     # rewritten (the first words changed): read whole
        f.write(text.replace("gazebo", "belvedere"))
    del starts[:]
    run(capsys, "index")
    assert starts and all(start == 0 for _, start in starts)
    assert search_ids(capsys, "belvedere", "--no-refresh") == [sid] and search_ids(capsys, "gazebo", "--no-refresh") == []


def _extra_lines(fmt):
    """Lines whose reading depends on earlier ones (repeats indexed once, streamed parts joined)."""
    if fmt == "copilot":
        return [{"type": "assistant.reasoning", "data": {"content": "weigh the options"}, "id": "r1", "timestamp": _iso(90)},
                {"type": "assistant.message", "data": {"content": "done", "reasoningText": "weigh the options"},
                 "id": "r2", "timestamp": _iso(91)},
                {"type": "user.message", "data": {"content": "again\n<reminder>be brief</reminder>\n<userRequest>again</userRequest>"},
                 "id": "r3", "timestamp": _iso(92)},
                {"type": "user.message", "data": {"content": "more\n<reminder>be brief</reminder>\n<userRequest>more</userRequest>"},
                 "id": "r4", "timestamp": _iso(93)}]
    if fmt == "kimi-code":
        return [{"type": "turn.steer", "input": "also check the logs", "time": 1777629700000},
                {"type": "context.append_loop_event", "time": 1777629701000,
                 "event": {"type": "content.part", "stepUuid": "z", "part": {"type": "text", "text": "part one, "}}},
                {"type": "context.append_loop_event", "time": 1777629702000,
                 "event": {"type": "content.part", "stepUuid": "z", "part": {"type": "text", "text": "part two"}}},
                {"type": "context.append_message", "time": 1777629703000,
                 "message": {"role": "user", "content": [{"type": "text", "text": "also check the logs"}], "origin": {"kind": "user"}}},
                {"type": "context.append_message", "time": 1777629704000,
                 "message": {"role": "assistant", "content": [{"type": "text", "text": "part one, part two"}]}}]
    if fmt == "kimi-cli":
        return [{"timestamp": 1777629700, "message": {"type": "ContentPart", "payload": {"type": "think", "think": "a "}}},
                {"timestamp": 1777629701, "message": {"type": "ContentPart", "payload": {"type": "think", "think": "thought"}}},
                {"timestamp": 1777629702, "message": {"type": "StepBegin", "payload": {}}},
                {"timestamp": 1777629703, "message": {"type": "ContentPart", "payload": {"type": "text", "text": "the end"}}}]
    if fmt == "openclaw":
        return [{"type": "session_info", "name": "Named later", "timestamp": _iso(90)}]
    return []


DROID_STREAM = [
    {"type": "system", "session_id": "sx", "timestamp": 1767812640310, "cwd": "/d"},
    {"type": "message", "session_id": "sx", "timestamp": 1767812641000, "role": "user", "text": "List files"},
    {"type": "message", "session_id": "sx", "timestamp": 1767812641500, "role": "assistant", "id": "a1", "text": "Look"},
    {"type": "message", "session_id": "sx", "timestamp": 1767812641600, "role": "assistant", "id": "a1", "subtype": "delta",
     "text": "ing now"},
    {"type": "tool_call", "session_id": "sx", "timestamp": 1767812642000, "id": "c1", "toolName": "Execute",
     "parameters": {"command": "ls"}},
    {"type": "tool_result", "session_id": "sx", "timestamp": 1767812643000, "id": "c1", "value": {"stdout": "a.txt"}},
    {"type": "message", "session_id": "sx", "timestamp": 1767812643500, "role": "assistant", "id": "a2", "text": "Done"},
    {"type": "completion", "session_id": "sx", "timestamp": 1767812644000, "finalText": "Done"},
]


@pytest.mark.parametrize("fmt", sorted(APPEND_FORMATS) + ["droid-stream"])
def test_a_journal_read_in_slices_stopping_at_every_clean_line_gives_what_one_read_gives(fmt, tmp_path):
    if fmt == "droid-stream":
        parser, path, records = "droid", str(tmp_path / "x.jsonl"), DROID_STREAM
    else:
        parser, folder, name, sid, head, turn = APPEND_FORMATS[fmt]
        path = str(tmp_path / folder / name)
        records = head + turn(0, "gazebo") + turn(1, "trellis") + _extra_lines(fmt) + turn(2, "pergola")
    write_jsonl(path, records)
    whole = PARSERS[parser].parse(path, ParseReport())[0]
    chunks, resume, reads = [], None, 0
    while True:   # as the indexer reads a large file: a slice at a time, each going on from the last checkpoint
        s = PARSERS[parser].parse(path, ParseReport(), resume=resume, limit=1)[0]
        chunks = chunks[:resume["seq"] if resume else 0] + [(c.kind, c.tool, c.text) for c in s.chunks]
        reads += 1
        if s.complete:
            break
        resume = s.checkpoint
    assert reads >= 3
    assert chunks == [(c.kind, c.tool, c.text) for c in whole.chunks]
    meta = ("session_id", "name", "cwd", "created", "modified", "parent")
    assert [getattr(s, k) for k in meta] == [getattr(whole, k) for k in meta]


def test_a_copilot_sub_agent_appearing_in_an_append_makes_the_file_read_whole(env, tmp_path, capsys, monkeypatch):
    root = tmp_path / "session-state"
    path = str(root / "sid-c" / "events.jsonl")
    write_config({"sources": [{"parser": "copilot", "path": str(root)}]}, tmp_path)
    write_jsonl(path, APPEND_FORMATS["copilot"][4] + _copilot_turn(0, "gazebo"))
    run(capsys, "index")
    starts = read_starts(monkeypatch)
    size = os.path.getsize(path)
    with open(path, "a") as f:
        f.write(json.dumps({"type": "subagent.started", "data": {"toolCallId": "task-1", "agentDisplayName": "Explorer"},
                            "id": "s1", "timestamp": _iso(50)}) + "\n")
        f.write(json.dumps({"type": "assistant.message", "data": {"parentToolCallId": "task-1", "content": "scanning the orangery"},
                            "id": "s2", "timestamp": _iso(51)}) + "\n")
    run(capsys, "index")
    assert starts == [("events.jsonl", size), ("events.jsonl", 0)]   # tried from the checkpoint, then whole
    assert search_ids(capsys, "orangery", "--no-refresh") == ["sid-c/task-1"]
    assert search_ids(capsys, "gazebo", "--no-refresh") == ["sid-c"]


def test_a_tool_call_waiting_for_its_result_is_completed_when_the_result_is_appended(env, capsys, monkeypatch):
    w = PiWriter(env, "wait-1")
    w.user("run the migrations").assistant("Running.", calls=[("c9", "bash", {"command": "alembic upgrade head"})])
    path = w.save()
    run(capsys, "index")
    offset_before = os.path.getsize(path)
    with open(path, "a") as f:
        f.write(line({"type": "message", "id": "r9", "parentId": None, "timestamp": "2026-03-10T09:40:00.000Z",
                      "message": {"role": "toolResult", "toolCallId": "c9", "toolName": "bash",
                                  "content": [{"type": "text", "text": "Running upgrade quetzal_schema"}], "isError": False}}))
    starts = read_starts(monkeypatch)
    assert search_ids(capsys, "quetzal_schema", "--tool", "bash") == ["wait-1"]
    assert 0 < starts[0][1] < offset_before  # re-read from before the waiting call, not from the start
    code, out, _ = run(capsys, "search", "alembic", "--json", "--no-refresh")
    assert [m["kind"] for m in json.loads(out)["results"][0]["matches"]].count("tool") == 1


def test_a_shrunk_or_rewritten_file_is_reindexed_from_the_start(corpus, capsys, monkeypatch):
    w = PiWriter(corpus, "shrink-1")
    w.user("first topic ocelot").user("second topic pangolin")
    w.save()
    run(capsys, "index")
    starts = read_starts(monkeypatch)
    w.lines = w.lines[:2]
    w.save()  # shrank: the second message is gone
    assert search_ids(capsys, "pangolin") == []
    assert starts[-1][1] == 0
    w2 = PiWriter(corpus, "shrink-1")
    w2.user("entirely new words narwhal").user("second topic pangolin")
    w2.save()  # same name, start rewritten
    assert search_ids(capsys, "narwhal") == ["shrink-1"] and search_ids(capsys, "ocelot") == []
    assert starts[-1][1] == 0


def test_a_big_file_read_in_slices_gives_what_one_full_read_gives(env, capsys, monkeypatch):
    w = PiWriter(env, "big-1")
    for i in range(60):
        w.user("question %d about the yak shaving pipeline" % i)
        w.assistant("answer %d" % i, calls=[("k%d" % i, "bash", {"command": "make step%d" % i})])
        w.result("k%d" % i, "bash", "step %d done with lemur output" % i)
    w.save()
    run(capsys, "index")
    whole = index_snapshot(capsys, queries=("yak shaving", "lemur", "step42", "question 17"))
    monkeypatch.setattr(sesame, "SLICE_BYTES", 700)
    monkeypatch.setattr(sesame, "PART_CHARS", 900)  # many parts too
    run(capsys, "index", "--full")
    sliced = index_snapshot(capsys, queries=("yak shaving", "lemur", "step42", "question 17"))
    monkeypatch.setattr(sesame, "SLICE_BYTES", 10 ** 9)
    run(capsys, "index", "--full")
    assert index_snapshot(capsys, queries=("yak shaving", "lemur", "step42", "question 17")) == sliced
    assert sliced[0] == whole[0]


@pytest.mark.parametrize("agent", ["codex", "gemini", "qwen"])
def test_a_big_codex_gemini_or_qwen_file_read_in_slices_gives_what_one_read_gives(env, tmp_path, capsys, monkeypatch,
                                                                                agent):
    root = tmp_path / agent
    if agent == "codex":
        path, records = cc_rollout(root), [cc_cx_meta()]
        for i in range(40):
            records += codex_turn(i, "question %d about the yak shaving pipeline" % i, "answer %d" % i,
                                  ("make step%d" % i, "step %d done with lemur output" % i), turn_start=i % 2 == 0)
    elif agent == "gemini":
        path, records = root / "proj" / "chats" / "session-2026-04-29T21-39-g1.jsonl", [ogc_GEMINI_META]
        for i in range(40):
            records += [{"id": "u%d" % i, "type": "user", "content": "question %d about the yak shaving pipeline" % i},
                        {"id": "a%d" % i, "type": "gemini", "content": "answer %d" % i, "toolCalls": [
                            {"id": "t%d" % i, "name": "run_shell_command", "args": {"command": "make step%d" % i},
                             "result": [{"functionResponse": {"id": "t%d" % i, "response": {
                                 "output": "step %d done with lemur output" % i}}}]}]},
                        {"$set": {"lastUpdated": "2026-04-29T21:40:%02dZ" % i}}]
    else:
        path, records = root / "proj" / "chats" / (ot_SID + ".jsonl"), []
        for i in range(40):
            records += [ot_q("u%d" % i, None, "user", message={"role": "user", "parts": [
                            {"text": "question %d about the yak shaving pipeline" % i}]}),
                        ot_q("a%d" % i, None, "assistant", message={"role": "model", "parts": [
                            {"text": "answer %d" % i},
                            {"functionCall": {"id": "c%d" % i, "name": "run_shell_command",
                                              "args": {"command": "make step%d" % i}}}]}),
                        ot_q("r%d" % i, None, "tool_result", message={"role": "user", "parts": [{"functionResponse": {
                            "id": "c%d" % i, "response": {"output": "step %d done with lemur output" % i}}}]})]
    write_config({"sources": [{"parser": agent, "path": str(root)}]}, tmp_path)
    write_jsonl(path, records)
    queries = ("yak shaving", "lemur", "step42", "question 17")
    run(capsys, "index")
    whole = index_snapshot(capsys, queries=queries)
    monkeypatch.setattr(sesame, "SLICE_BYTES", 700)
    starts = parse_starts(monkeypatch)
    run(capsys, "index", "--full")
    assert len(starts) > 5   # read in many slices
    assert index_snapshot(capsys, queries=queries) == whole


def test_search_refreshes_the_index_by_default_but_not_with_no_refresh(corpus, capsys):
    PiWriter(corpus, "fresh-1").user("brand new mongoose topic").save()
    assert search_ids(capsys, "mongoose", "--no-refresh") == []
    assert search_ids(capsys, "mongoose") == ["fresh-1"]


def test_interrupted_index_leaves_a_usable_index_and_the_next_run_completes_it(env, capsys, monkeypatch):
    build_corpus(env)
    original = sesame.index_file
    count = []

    def dying(*a, **kw):
        count.append(1)
        if len(count) == 6:
            raise KeyboardInterrupt
        return original(*a, **kw)
    monkeypatch.setattr(sesame, "BATCH_FILES", 2)
    monkeypatch.setattr(sesame, "index_file", dying)
    code, _, err = run(capsys, "index")
    assert code == 130
    monkeypatch.setattr(sesame, "index_file", original)
    code, out, _ = run(capsys, "search", "kubernetes", "--json", "--no-refresh")
    assert code == 0  # usable while incomplete
    code, out, _ = run(capsys, "index", "--json")
    assert json.loads(out)["filesIndexed"] == 6  # 4 were committed before the interruption
    assert search_ids(capsys, "kubernetes autoscaler")[0] == "cdcd8888-k8s"


def test_full_rebuild_gives_the_same_results(corpus, capsys):
    before = run(capsys, "search", "upload bucket", "--json")[1]
    code, out, _ = run(capsys, "index", "--full", "--json")
    assert code == 0 and json.loads(out)["filesIndexed"] == 10
    assert run(capsys, "search", "upload bucket", "--json")[1] == before


def test_parser_version_change_reindexes_its_files(corpus, capsys, monkeypatch):
    monkeypatch.setattr(sesame.PiParser, "version", 99)
    code, out, _ = run(capsys, "index", "--json")
    assert json.loads(out)["filesIndexed"] == 10


def test_older_schema_is_rebuilt_and_newer_schema_is_refused(corpus, capsys, tmp_path):
    import sqlite3
    db = str(tmp_path / "data" / "index.sqlite")
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    con.commit()
    con.close()
    assert search_ids(capsys, "carousel") == ["bbbb2222-carousel"]  # rebuilt by itself
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    code, _, err = run(capsys, "search", "carousel")
    assert code == 1 and "newer Sesame" in err


def test_corrupt_index_is_set_aside_and_rebuilt(corpus, capsys, tmp_path):
    db = tmp_path / "data" / "index.sqlite"
    for ext in ("-wal", "-shm"):
        if os.path.exists(str(db) + ext):
            os.remove(str(db) + ext)
    db.write_bytes(b"this is not an sqlite database" * 100)
    code, out, err = run(capsys, "search", "carousel", "--json")
    assert code == 0 and "corrupt" in err
    assert json.loads(out)["results"][0]["sessionId"] == "bbbb2222-carousel"
    assert any(n.startswith("index.sqlite.corrupt-") for n in os.listdir(tmp_path / "data"))


def test_index_and_data_dir_are_readable_by_owner_only(corpus, tmp_path, capsys):
    data = tmp_path / "data"
    run(capsys, "search", "carousel")  # a refresh that sweeps: the sweep position is written too
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    names = os.listdir(data)
    assert "sweep" in names and any(n.startswith("index.sqlite") for n in names)
    for name in names:
        assert stat.S_IMODE(os.stat(data / name).st_mode) == 0o600, name


def test_second_indexer_waits_for_the_first(corpus, tmp_path, capsys, monkeypatch):
    lock = sesame.IndexLock(str(tmp_path / "data"))
    assert lock.acquire(0)
    try:
        monkeypatch.setattr(sesame, "LOCK_WAIT_SECONDS", 0.3)
        code, _, err = run(capsys, "index")
        assert code == 1 and "another sesame index" in err
        code, out, err = run(capsys, "search", "carousel", "--json")  # search still answers
        assert code == 0 and "using the index as it is" in err
    finally:
        lock.release()
    assert run(capsys, "index")[0] == 0


def test_a_search_while_another_indexer_runs_waits_only_for_what_it_must_read(history, tmp_path, capsys, monkeypatch):
    # Another indexer holds the lock (the MCP server's background refresh, `sesame watch`: ~0.1 s
    # every few seconds at 1 GB). A search that finds nothing to read answers at once; one that
    # finds an appended message waits for the lock, then reads it, rather than missing it.
    import threading
    monkeypatch.setattr(sesame, "BUSY_LOCK_WAIT", 5)
    lock = sesame.IndexLock(str(tmp_path / "data"))
    assert lock.acquire(0)
    try:
        t = time.monotonic()
        code, out, err = run(capsys, "search", "routine", "--json")
        assert code == 0 and json.loads(out)["results"] and time.monotonic() - t < 2
        assert "another sesame index" not in err, err
        monkeypatch.chdir(history.project)   # (this folder's sessions are compared by every search)
        append_user(history[12], "written while another indexer ran: the okapi plan")
        threading.Timer(0.3, lock.release).start()
        assert search_ids(capsys, "okapi") == ["old-12"]
    finally:
        lock.release()
    assert lock.acquire(0)   # and the search let go of it
    try:
        monkeypatch.setattr(sesame, "BUSY_LOCK_WAIT", 0.2)
        append_user(history[16], "the tapir plan, while the lock stays held")
        code, out, err = run(capsys, "search", "tapir", "--json")
        assert code == 0 and json.loads(out)["results"] == [] and "another sesame index is running" in err
    finally:
        lock.release()
    assert search_ids(capsys, "tapir") == ["old-16"]
    # An MCP call stays warm: it waits a quarter of a second at most, not BUSY_LOCK_WAIT.
    monkeypatch.setattr(sesame, "BUSY_LOCK_WAIT", 5)
    warm = sesame.WarmIndex()
    assert lock.acquire(0)
    try:
        append_user(history[20], "the quoll plan, while another indexer holds the lock")
        t = time.monotonic()
        reply = sesame.call_tool({"name": "search", "arguments": {"query": "quoll"}}, warm)
        assert not reply["isError"] and reply["structuredContent"]["results"] == [] and time.monotonic() - t < 2
    finally:
        lock.release()
    try:
        reply = sesame.call_tool({"name": "search", "arguments": {"query": "quoll"}}, warm)
        assert [r["sessionId"] for r in reply["structuredContent"]["results"]] == ["old-20"]
    finally:
        warm.close()


def test_search_while_another_process_indexes(corpus, tmp_path):
    envv = dict(os.environ)
    for i in range(40):
        PiWriter(corpus, "bulk-%03d" % i).user("bulk session number %d about llamas" % i).save()
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "sesame.py"), "index"], env=envv,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "search", "carousel", "--json", "--no-refresh"],
                       env=envv, capture_output=True, text=True)
    p.wait()
    assert r.returncode == 0 and json.loads(r.stdout)["results"][0]["sessionId"] == "bbbb2222-carousel"
    assert p.returncode == 0


class watching:
    """`sesame watch --interval SECONDS` in a process of its own for the `with` block, stopped with
    Ctrl-C after it; then .returncode and .err (its stderr)."""

    def __init__(self, interval):
        self.interval = interval

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sesame.py"), "watch", "--interval",
                                      str(self.interval)], env=dict(os.environ), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc):
        import signal
        self.proc.send_signal(signal.SIGINT)
        _, self.err = self.proc.communicate(timeout=10)
        self.returncode = self.proc.returncode
        return False


def found_soon(capsys, word, tries=50, pause=0.2):
    """The sessions a search without its own refresh finds for `word`, once something else (a watch)
    has indexed it, or [] after `tries` looks."""
    import time
    for _ in range(tries):
        time.sleep(pause)
        found = search_ids(capsys, word, "--no-refresh")
        if found:
            return found
    return []


def test_watch_keeps_the_index_fresh_and_stops_cleanly_on_ctrl_c(corpus, capsys):
    import time
    with watching(0.2) as w:
        time.sleep(0.5)
        PiWriter(corpus, "watched-1").user("the wildebeest migration").save()
        assert found_soon(capsys, "wildebeest") == ["watched-1"]
    assert w.returncode == 0 and "Traceback" not in w.err and "keeping" in w.err


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_watch_stops_on_ctrl_c_even_when_python_loses_the_interrupt(corpus, capsys, monkeypatch):
    # A Ctrl-C that lands while a finaliser runs (here: a half-read generator closed as it is
    # dropped) raises KeyboardInterrupt where Python only prints it; the watch must stop anyway.
    import signal
    rounds, before = [], signal.getsignal(signal.SIGINT)

    def refresh(*args, **kwargs):
        rounds.append(1)
        if len(rounds) > 20:
            raise AssertionError("watch went on after Ctrl-C")
        if len(rounds) == 2:
            def reader():
                try:
                    yield 1
                finally:
                    signal.raise_signal(signal.SIGINT)
            half_read = reader()
            next(half_read)
            del half_read  # closed here, by the collector: the KeyboardInterrupt is lost
        return None
    monkeypatch.setattr(sesame, "refresh_index", refresh)
    assert sesame.main(["watch", "--interval", "0.01"]) == 0
    assert len(rounds) == 2
    assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C is as it was after the watch


# ==================================================================================================
# Query
# ==================================================================================================

@pytest.mark.parametrize("text", [
    'parser.py', 'OPS-306', "TypeError: 'NoneType'", '--verbose', 'C++', '(bug', 'bug)', '$foo', '@decorator',
    '#123', "it's", 'std::vector<int>', 'NOT operator', 'sqlite AND', 'OR x', '"hello world', 'text:bug',
    'x\x00y', '🙂', 'a* b**', 'NEAR(a b)', '{a b}: c', '^start', 'a + b', "'; DROP TABLE sessions; --",
    'café naïve', '"unbalanced "quote', '-', '*carousel', 'carousel*'])
def test_any_user_text_is_a_valid_query(corpus, capsys, text):
    code, out, err = run(capsys, "search", text, "--json", "--no-refresh")
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 0:
        json.loads(out)


def test_query_of_only_punctuation_is_a_usage_error(corpus, capsys):
    code, out, err = run(capsys, "search", "*** ...", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "usage"


def test_query_escaping_makes_every_word_a_literal():
    q = sesame.Query('parser.py -excluded "exact phrase" pref* AND')
    assert q.terms == ['"parser.py"', '"exact phrase"', '"pref"*']   # "AND" is a stop word here
    assert sesame.Query("AND").terms == ['"AND"']
    assert q.excluded == ['"excluded"']


# ==================================================================================================
# Search: ranking
# ==================================================================================================

@pytest.mark.parametrize("query,expected", [
    ("nix infrastructure simplify", "aaaa1111-nix"),          # words spread over messages
    ("carousel company website", "bbbb2222-carousel"),
    ("feature flags rollout percentage", "ffff6666-compact"),  # only in the compaction summary
    ("zanzibar", "efef9999-toolonly"),                          # only in tool output
    ("ECONNREFUSED", "cccc3333-ci"),                            # error string in tool output
    ("get_user_by_email", "dddd4444-users"),
    ("useDebouncedCallback", "dddd4444-users"),
    ("package.json", "eeee5555-billing"),
    ("src/billing/invoice_pdf.py", "eeee5555-billing"),
    ("Landing page", "bbbb2222-carousel"),                      # the session name counts
])
def test_the_right_session_ranks_first(corpus, capsys, query, expected):
    assert search_ids(capsys, query)[0] == expected


@pytest.fixture
def cjk_corpus(env, capsys):
    """Chinese and Japanese sessions whose words share characters, and an English one."""
    for sid, user, reply in (
            ("zh-fallback", "帮我补充状态命令的无登录降级体验", "已完成：未登录时显示本地缓存的隧道状态。"),
            ("zh-login", "登录页面需要重新设计", "我用React写了新的登录组件。"),
            ("zh-degrade", "服务降级策略怎么配置", "可以在网关上配置熔断和降级规则。"),
            ("zh-both", "登录失败以后要降级吗？", "登录和降级是两回事：先修登录，降级以后再说。"),
            ("ja-voice", "ローカル音声アシスタントのバックエンドを作成したい", "FastAPIで音声認識サービスを実装しました。"),
            ("ja-branch", "ブランチを作成してコミットしてください", "mainブランチにコミットしました。"),
            ("en-react", "Write the React login component", "Done: React component with hooks.")):
        PiWriter(env, sid).user(user).assistant(reply).save()
    assert run(capsys, "index")[0] == 0
    return env


@pytest.mark.parametrize("query,expected,marked", [
    ("登录降级", "zh-fallback", "**登录降级**"),        # four characters inside a run
    ("状态命令", "zh-fallback", "**状态命令**"),
    ("隧道", "zh-fallback", "**隧道**"),                # two, in the reply
    ("音声アシスタント", "ja-voice", "**音声アシスタント**"),  # kanji and katakana
    ("認識", "ja-voice", "**認識**"),
    ("作成したい", "ja-voice", "**作成したい**"),       # kanji and hiragana
])
def test_a_chinese_or_japanese_word_inside_a_run_finds_its_session_and_is_marked(cjk_corpus, capsys, query, expected, marked):
    # unicode61 keeps a run of CJK characters as one token: a word inside it was never found.
    top = search_json(capsys, query)["results"]
    assert top[0]["sessionId"] == expected, (query, [r["sessionId"] for r in top])
    assert any(marked in m["snippet"] for m in top[0]["matches"]), top[0]["matches"]


def test_cjk_words_typed_apart_rank_first_where_they_are_written_together(cjk_corpus, capsys):
    # Chinese puts no space between words: "登录 降级" typed is "登录降级" written, not a session
    # that says each word more often, apart.
    assert search_ids(capsys, "登录 降级")[:2] == ["zh-fallback", "zh-both"]


def test_a_cjk_sentence_not_written_so_is_searched_by_its_bigrams(cjk_corpus, capsys):
    # A sentence typed whole is one run: as a phrase it found nothing unless written so, word for word.
    data = search_json(capsys, "怎么配置服务降级策略")
    assert data["results"][0]["sessionId"] == "zh-degrade"
    assert any("**服务降级策略怎么配置**" in m["snippet"] for m in data["results"][0]["matches"]), [m["snippet"] for m in data["results"][0]["matches"]]
    assert [n["why"] for n in data["alsoSearched"]] == ["bigrams"]
    assert search_json(capsys, "服务降级策略")["alsoSearched"] == []   # written so: one phrase


def test_a_query_mixing_cjk_and_latin_words_finds_latin_words_glued_to_cjk(cjk_corpus, capsys):
    # "用React写": unicode61 made one token of the three scripts, so React was not found there.
    assert search_ids(capsys, "React 组件")[0] == "zh-login"
    ids = search_ids(capsys, "React")
    assert set(ids[:2]) == {"zh-login", "en-react"}
    top = search_json(capsys, "React 登录")["results"][0]
    assert top["sessionId"] == "zh-login" and any("用**React**写" in m["snippet"] for m in top["matches"])
    assert search_ids(capsys, "React component")[0] == "en-react"  # English as before


def test_a_cjk_word_is_not_spelling_corrected_into_a_latin_one(cjk_corpus, capsys):
    PiWriter(cjk_corpus, "en-commit").user("Commits need signing").assistant("commits are signed now").save()
    assert run(capsys, "index")[0] == 0
    data = search_json(capsys, "commit组")   # absent: "commits" is one edit away in the vocabulary
    assert [n for n in data.get("alsoSearched", []) if n["why"] == "spelling"] == []
    assert "en-commit" not in [r["sessionId"] for r in data["results"]]


def test_thinking_does_not_outrank_what_was_said(corpus, capsys):
    assert search_ids(capsys, "kubernetes autoscaler")[:2] == ["cdcd8888-k8s", "abab7777-thinking"]


def test_a_session_of_injected_context_only_is_no_result_until_someone_talks_in_it(env, tmp_path, capsys):
    # About 40 of 102 real Codex rollouts hold only the environment and AGENTS.md context Codex
    # injects: nobody worked in them, yet they matched every word of the project's AGENTS.md.
    write_config({"sources": [{"parser": "codex", "path": str(tmp_path / "sessions")}]}, tmp_path)
    agents_md = "# AGENTS.md instructions for /home/u/app\n\nthe lmstudio provider lives in providers/lmstudio.ts"
    empty_id, real_id = "019a93b9-0000-7600-98ff-000000000001", "019a93b9-0000-7600-98ff-000000000002"
    empty = write_jsonl(cc_rollout(tmp_path, empty_id), [
        cc_cx_meta(tid=empty_id),
        cc_cx_msg("2025-11-17T21:30:29.100Z", "user", "<environment_context>\n  <cwd>/home/u/app</cwd>\n</environment_context>"),
        cc_cx_msg("2025-11-17T21:30:29.200Z", "user", agents_md)])
    write_jsonl(cc_rollout(tmp_path, real_id), [
        cc_cx_meta(tid=real_id, ts="2025-11-10T10:00:00.000Z"),
        cc_cx_msg("2025-11-10T10:00:01.000Z", "user", "the model list from lmstudio is empty"),
        cc_cx_msg("2025-11-10T10:00:02.000Z", "assistant", "The provider parses the wrong field.")])
    assert search_ids(capsys, "lmstudio provider") == [real_id]
    code, out, _ = run(capsys, "show", empty_id, "--json")
    assert code == 0 and json.loads(out)["session"]["sessionId"] == empty_id   # show still opens it
    with open(empty, "a") as f:                                         # someone works in it after all
        f.write(json.dumps(cc_cx_msg("2025-11-17T21:31:00.000Z", "user", "switch the lmstudio provider to v1")) + "\n")
    assert sorted(search_ids(capsys, "lmstudio provider")) == sorted([real_id, empty_id])


def test_conversation_outranks_tool_output(corpus, capsys):
    assert search_ids(capsys, "E403")[:2] == ["1212aaaa-tooltalk", "efef9999-toolonly"]


def test_relaxed_query_still_returns_sessions_with_most_words(corpus, capsys):
    code, out, _ = run(capsys, "search", "kubernetes autoscaler permissions walrus", "--json")
    results = json.loads(out)["results"]
    assert results[0]["sessionId"] == "cdcd8888-k8s" and results[0]["matchedAllTerms"] is False


def test_words_typed_together_rank_first_even_with_a_repeated_word(env, capsys):
    """The phrase boost compares the query as typed: "the" twice in it is still the phrase."""
    PiWriter(env, "exact").user("How do we fix the error in the test for the parser?").assistant("Done.").save()
    w = PiWriter(env, "scattered")
    for _ in range(4):
        w.user("The error shows in one test; fix that test.").assistant("The test error: a fix for the error.")
    w.save()
    assert search_ids(capsys, "fix the error in the test")[0] == "exact"


def test_phrase_prefix_and_exclusion(corpus, capsys):
    assert search_ids(capsys, '"image carousel"') == ["bbbb2222-carousel"]
    assert search_ids(capsys, '"carousel image"') == []
    assert search_ids(capsys, "carous*") == ["bbbb2222-carousel"]
    assert "cdcd8888-k8s" not in search_ids(capsys, "autoscaler -permissions")
    assert search_ids(capsys, "autoscaler -permissions") == ["abab7777-thinking"]


def test_no_match_is_exit_zero_with_zero_results(corpus, capsys):
    code, out, _ = run(capsys, "search", "xylophonist", "--json")
    assert code == 0 and json.loads(out)["resultCount"] == 0


# -- Ranking v2: the causes of misses, one fixture each ---------------------------------------

@pytest.fixture
def vocab_corpus(env, capsys):
    """Sessions whose words are common to all of them, plus distinct topics for typos and names."""
    for i in range(12):
        w = PiWriter(env, "common-%02d" % i, cwd="/home/dev/app%d" % i, start="2026-02-%02dT10:00:00.000Z" % (i + 1))
        w.user("fix the test error in the docker build of the node service %d" % i)
        w.assistant("The test passes now; the docker error was a node version problem.")
        w.save()
    w = PiWriter(env, "target-common", cwd="/home/dev/deep", start="2026-03-20T10:00:00.000Z")
    w.user("fix the test error: docker build of the node service fails, test error again, the docker test error")
    w.assistant("Fixed the docker test error: node modules were cached. The test error is gone.")
    w.save()
    w = PiWriter(env, "k8s-ingress", cwd="/home/dev/ops", start="2026-03-01T10:00:00.000Z")
    w.user("The kubernetes ingress times out after sixty seconds for uploads.")
    w.assistant("Raised proxy-read-timeout on the ingress annotations.")
    w.save()
    w = PiWriter(env, "stripe-hook", cwd="/home/dev/shop", start="2026-03-02T10:00:00.000Z")
    w.user("Wire up the stripe events.")
    w.tool("write", {"path": "src/webhooks.ts", "content": "export async function handlePaymentIntentWebhook(evt) {}"},
           "written")
    w.assistant("Added the handler.")
    w.save()
    w = PiWriter(env, "simplify-flake", cwd="/home/dev/nix", start="2026-03-03T10:00:00.000Z")
    w.user("The flake got complicated.")
    w.assistant("I simplified the flake inputs and compacted the overlays.")
    w.save()
    w = PiWriter(env, "db-migration", cwd="/home/dev/api", start="2026-03-04T10:00:00.000Z")
    w.user("Write the database migration for the orders table.")
    w.assistant("Added migration 0042 for the orders database table.")
    w.save()
    w = PiWriter(env, "release-script", cwd="/home/dev/rel", start="2026-03-05T10:00:00.000Z")
    w.user("Run the release script.")
    w.tool("bash", {"command": "./scripts/publish-release.sh --dry-run"}, "... [2000 characters truncated] ...\nok")
    w.assistant("Dry run passed.")
    w.save()
    assert run(capsys, "index")[0] == 0
    return env


def search_json(capsys, *argv):
    budget = () if "--max-chars" in argv else ("--max-chars", "0")
    code, out, err = run(capsys, "search", *argv, "--json", "--fields", "full", *budget)
    assert code == 0, err
    return json.loads(out)


def test_a_query_of_common_words_still_ranks_by_those_words(vocab_corpus, capsys):
    data = search_json(capsys, "fix the docker test error")
    assert data["results"][0]["sessionId"] == "target-common"
    assert len(data["results"]) >= 3 and data["hasMore"]


def test_words_are_not_written_together_across_two_messages_or_two_names(env, capsys):
    """The last word of one message and the first of the next (or of two camelCase names) are not
    a phrase: such a session is found by its words, after the one that has them together."""
    w = PiWriter(env, "apart")
    for i in range(3):
        w.user("Which file holds the parser").assistant("py files under src hold it; the parser is there.")
    w.user("useMainParser PyObjectReader").save()
    PiWriter(env, "together", cwd="/home/dev/other").user("We rewrote parser.py today, with a long story "
                                                          "about many other unrelated things besides.").save()
    data = search_json(capsys, "parser py")
    assert [(r["sessionId"], r["stage"]) for r in data["results"]] == [("together", "words together"),
                                                                         ("apart", "all words")]


def test_a_word_a_camelcase_name_splits_is_found_whole(env, capsys):
    """People type "websocket", "oauth", "postgresql" whole; the names split them (WebSocket..., OAuth2Client,
    PostgreSQLPool). Neighbouring parts are indexed joined, and the match is marked in the name."""
    for i in range(3):
        PiWriter(env, "talk-%d" % i, cwd="/home/dev/t%d" % i).user("the web page, a socket, a client, a pool").save()
    w = PiWriter(env, "ws", cwd="/home/dev/ws")
    w.user("Reconnect after the proxy drops us.")
    w.tool("write", {"path": "net.ts", "content": "class WebSocketReconnectHandler {}"}, "ok").save()
    w = PiWriter(env, "auth", cwd="/home/dev/auth")
    w.user("Refresh the tokens.").tool("write", {"path": "a.py", "content": "api = OAuth2Client(cfg)"}, "ok").save()
    w = PiWriter(env, "pg", cwd="/home/dev/pg")
    w.user("Size the pool.").tool("write", {"path": "db.java", "content": "new PostgreSQLPoolFactory()"}, "ok").save()
    for query, want, marked in (("websocket reconnect", "ws", "**WebSocketReconnect**"), ("oauth client", "auth", "**OAuth**"),
                                ("postgresql pool", "pg", "**PostgreSQLPool**")):
        data = search_json(capsys, query)
        assert data["results"][0]["sessionId"] == want, query
        assert marked in json.dumps(data["results"][0]["matches"]), data["results"][0]["matches"]


def test_a_prefix_finds_and_marks_the_part_of_a_camelcase_name(env, capsys):
    """`write*` matches StreamWriter through its parts, as FTS5 does: the result shows it marked
    (the marking once missed it and the search failed with a traceback)."""
    w = PiWriter(env, "stream")
    w.user("Wrap the socket.").tool("write", {"path": "io.py", "content": "class LineStreamWriter(Base): pass"}, "ok")
    w.save()
    data = search_json(capsys, "linestreamw*")
    assert [r["sessionId"] for r in data["results"]] == ["stream"]
    assert "**LineStreamWriter**" in json.dumps(data["results"][0]["matches"])
    data = search_json(capsys, "writ*")
    assert data["results"][0]["sessionId"] == "stream"
    assert "Stream**Writer**" in json.dumps(data["results"][0]["matches"])


def test_the_words_written_together_rank_first_even_when_each_is_common_elsewhere(env, capsys):
    """The parts of getInitialColorScheme, asked as "initial color scheme", find the session that has
    the name, although other sessions say each word more often (the phrase stage)."""
    for i in range(4):
        w = PiWriter(env, "talk-%d" % i, cwd="/home/dev/ui%d" % i)
        w.user("The initial colour of the color picker: the color scheme and the initial scheme.")
        w.assistant("The color scheme is initial; scheme and color come from the initial theme.").save()
    w = PiWriter(env, "target", cwd="/home/dev/web")
    w.user("Dark mode flickers on first paint.")
    w.tool("edit", {"path": "src/theme.tsx", "newText": "useState(getInitialColorScheme())"}, "ok")
    w.assistant("Reading the theme before hydration now.").save()
    data = search_json(capsys, "initial color scheme")
    assert data["results"][0]["sessionId"] == "target"
    assert data["results"][0]["stage"] == "words together"
    assert data["results"][0]["matchedAllTerms"] is True
    # misspelt, the words are still together as corrected (the phrase was built of the typo)
    data = search_json(capsys, "inittal color scheme")
    assert data["results"][0]["sessionId"] == "target" and data["results"][0]["stage"] == "words together"


def test_words_naming_the_session_itself_and_function_words_around_a_phrase_do_not_count(env, capsys):
    # "the session about users email idx": `session` named what is searched for; it was required
    # (sessions saying "session" ranked first) and kept the phrase from matching. "where did we
    # get Too many open files": the phrase started with "where did we get" and matched nothing.
    for i in range(3):
        PiWriter(env, "talk-%d" % i, cwd="/home/dev/a%d" % i).user(
            "The session store keeps users; email goes out daily; the idx file is rebuilt.").assistant("ok").save()
        PiWriter(env, "files-%d" % i, cwd="/home/dev/b%d" % i).user(
            "Too many people open these files; we see many open questions about files.").assistant("ok").save()
    w = PiWriter(env, "index", cwd="/home/dev/db")
    w.user("lookups by email are slow").tool("write", {"path": "m.sql", "content": "CREATE INDEX users_email_idx ON users(email);"}, "")
    w.save()
    w = PiWriter(env, "ulimit", cwd="/home/dev/srv")
    w.user("the server dies under load").tool("bash", {"command": "node server.js"}, "Error: EMFILE: Too many open files")
    w.save()
    for query, target in (("the session about users email idx", "index"), ("a conversation where users email idx", "index"),
                          ("when we talked about users email idx", "index"), ("find the chat about users email idx", "index"),
                          ("where did we get Too many open files", "ulimit")):
        data = search_json(capsys, query)
        assert data["results"][0]["sessionId"] == target, (query, [r["sessionId"] for r in data["results"]])
        assert data["results"][0]["stage"] == "words together", query
    # a session noun that is what the user is after stays a word: "session cookie" is about sessions
    assert not sesame.Query("session cookie expiry").meta and not sesame.Query("session cookie expiry").words[0].stop
    assert not any(w.stop for w in sesame.Query("recall metrics for the ranker").words[:2])
    q = sesame.Query("the session where the session token expired")
    assert q.words[1].text == "session" and not q.words[1].stop


def test_among_sessions_with_every_word_the_one_holding_them_together_as_typed_ranks_first(env, capsys):
    """"acquirer timeout seconds": a session saying the three words in one sentence ranks above
    sessions saying them (or "acquire", the same stem) far apart and more often; and a word left out
    of the stages as common ("tests") still orders the sessions that have the others."""
    for i in range(6):
        w = PiWriter(env, "apart-%d" % i, cwd="/home/dev/lib%d" % i)
        w.user("acquire the lock, acquire it again, then acquire the next one.")
        w.assistant("Unrelated talk about the weather. " * 20 + "The timeout is long; raise the timeout.")
        w.user("Unrelated talk about the garden. " * 20 + "It takes seconds, many seconds.").save()
    w = PiWriter(env, "together", cwd="/home/dev/pay")
    for i in range(8):
        w.user("Let's go on with the payment cleanup, step %d." % i).assistant("Done with step %d of the cleanup." % i)
    w.user("What did we agree with the payment provider?")
    w.assistant("We set the acquirer call timeout to 8 seconds, with one retry.").save()
    assert search_ids(capsys, "acquirer timeout seconds")[0] == "together"


def test_a_session_whose_name_holds_the_query_words_together_ranks_first(env, capsys):
    """A Claude Code title (or a name the user gave) says what the session is about in a few words:
    a session titled "AI Agents: Architecture, Autonomy, and Scaling Challenges", whose talk says
    the words far apart, ranks above sessions saying them together in passing (the real-world case:
    it was 4th for "AI agents autonomy scaling")."""
    for i in range(3):
        w = PiWriter(env, "passing-%d" % i, cwd="/home/dev/robots%d" % i)
        for j in range(6):
            w.user("Step %d of the robot arm driver: calibrate the joints and log the angles." % j)
            w.assistant("Calibrated joint %d; the angles are logged to the console." % j)
        w.user("An aside: AI agents, their autonomy and scaling, are chapter %d of the book." % i)
        w.assistant("Noted for the book.").save()
    w = PiWriter(env, "titled", cwd="/home/dev/notes")
    name(w, "AI Agents: Architecture, Autonomy, and Scaling Challenges")
    w.user("Let us outline an essay about AI agents.")
    w.assistant("Section one: what the agents do. " + "Planning, tools and memory. " * 40)
    w.user("Section two is about autonomy: when should it ask the user?")
    w.assistant("Section three: scaling to many of them. " + "Queues and budgets. " * 40).save()
    assert search_ids(capsys, "AI agents autonomy scaling")[0] == "titled"


def test_the_stages_keep_the_rarest_of_the_common_words_not_the_first_typed(env, capsys):
    """Words in more than half the sessions are left out of the stages but the two rarest; counted
    only up to half, they tied and the first typed were kept. Here "widget" is in every session,
    "gadget" in 8 and "sprocket" in 7 of 10: the every-word stage needs gadget and sprocket, so a
    session without "sprocket" does not count as holding every word (and BM25 no longer reads
    "widget", the most frequent, in every session)."""
    for i in range(10):
        w = PiWriter(env, "s%d" % i, cwd="/home/dev/shop%d" % i)
        w.user("The widget order %d needs a review." % i)
        if i < 8:
            w.assistant("The gadget list for order %d is ready." % i)
        if i < 7:
            w.user("Add a sprocket to order %d." % i)
        w.assistant("Done with order %d." % i).save()
    data = search_json(capsys, "widget gadget sprocket")
    stages = {r["sessionId"]: r["stage"] for r in data["results"]}
    assert stages["s7"] != "all words" and all(stages["s%d" % i] == "all words" for i in range(7)), stages


def test_a_common_word_still_orders_the_sessions_holding_the_telling_ones(env, capsys):
    for i in range(6):
        w = PiWriter(env, "tests-%d" % i, cwd="/home/dev/sync")
        w.user("Run the tests %d." % i).assistant("The tests pass.").save()
    w = PiWriter(env, "upload-write", cwd="/home/dev/sync")
    w.user("The worker uploads a file twice.")
    w.tool("write", {"path": "worker.py", "content": "def skip_upload(entry): return entry.sha in SEEN"}, "ok")
    w.assistant("Upload dedupe added; every upload is checked once.").save()
    w = PiWriter(env, "upload-tests", cwd="/home/dev/sync")
    w.user("Write tests for the upload retry.").assistant("Added two cases.")
    for i in range(8):
        w.user("Next, step %d of the cleanup." % i).assistant("Done with step %d of the cleanup." % i)
    w.save()
    assert search_ids(capsys, "write tests upload")[0] == "upload-tests"


def test_a_misspelt_word_among_common_words_is_corrected_not_zero_results(vocab_corpus, capsys):
    data = search_json(capsys, "kuberntes ingres timeout")
    assert data["results"][0]["sessionId"] == "k8s-ingress"
    assert {"word": "kuberntes", "searched": ["kubernetes"], "why": "spelling"} in data["alsoSearched"]
    code, out, _ = run(capsys, "search", "kuberntes ingres timeout")
    assert "kubernetes" in out and "kuberntes" in out   # the human output says what was searched


def _osa_distance(a, b):
    """The restricted Damerau-Levenshtein distance, the textbook way (the reference edit_distance
    is checked against)."""
    d = [[i + j if not i * j else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def test_edit_distance_is_the_textbook_one_up_to_its_limit():
    """edit_distance leaves out what two words begin and end with alike and works out only the
    cells near the diagonal: it is the textbook distance wherever that is within the limit, and
    says "over" (limit + 1) otherwise; on random words of small alphabets (repeats and
    transpositions everywhere), edits of a word, and ids of one family."""
    rnd = random.Random(11)
    pairs = []
    for k in range(30000):
        alphabet = ("ab", "abc", "aab", "abcdefghij")[k % 4]
        a = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 9)))
        if k % 3:
            b = list(a)
            for _ in range(rnd.randint(0, 3)):
                at = rnd.randint(0, max(0, len(b) - 1))
                op = rnd.randint(0, 3)
                if op == 0 and b:
                    b[at] = rnd.choice(alphabet)
                elif op == 1:
                    b.insert(at, rnd.choice(alphabet))
                elif op == 2 and b:
                    del b[at]
                elif op == 3 and at + 1 < len(b):
                    b[at], b[at + 1] = b[at + 1], b[at]
            b = "".join(b)
        else:
            b = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 9)))
        pairs.append((a, b))
    pairs += [("buildword%04d" % rnd.randint(0, 9999), "buildword%04d" % rnd.randint(0, 9999)) for _ in range(2000)]
    within = 0
    for a, b in pairs:
        for limit in (1, 2, 3):
            truth = _osa_distance(a, b)
            assert sesame.edit_distance(a, b, limit) == (truth if truth <= limit else limit + 1), (a, b, limit)
            within += truth <= limit
    assert within > 30000   # (most pairs are edits within the limit: the exact path is exercised)


def test_an_absent_word_never_empties_the_results(vocab_corpus, capsys):
    data = search_json(capsys, "docker zyxwvutsrq")
    assert data["results"] and data["results"][0]["matchedAllTerms"] is False
    assert any(n["word"] == "zyxwvutsrq" and n["searched"] == [] for n in data["alsoSearched"])


def test_an_abbreviation_finds_the_long_form_and_the_match_is_marked(vocab_corpus, capsys):
    data = search_json(capsys, "k8s ingress")
    assert data["results"][0]["sessionId"] == "k8s-ingress"
    assert "kubernetes" in data["results"][0]["matchedWords"]
    data = search_json(capsys, "db migration")
    assert data["results"][0]["sessionId"] == "db-migration"


def test_the_short_forms_people_type_find_the_long_ones_sessions_say(env, capsys):
    # "the PR where we fixed the flaky retry", "the venv that would not activate": the sessions say
    # "pull request" and "virtualenv" (and the other way round).
    PiWriter(env, "pull-req").user("Open a pull request for the flaky retry fix").assistant("Opened it.").save()
    PiWriter(env, "retry-notes").user("The retry loop is flaky on slow disks").assistant("Added a backoff.").save()
    PiWriter(env, "virtualenv").user("The virtualenv will not activate in fish").assistant("Use activate.fish.").save()
    PiWriter(env, "fish-prompt").user("Make the fish prompt show the git branch").assistant("Done.").save()
    top = search_json(capsys, "pr flaky retry")["results"][0]
    assert top["sessionId"] == "pull-req" and "pull request" in top["matchedWords"]
    assert search_ids(capsys, "venv activate fish")[0] == "virtualenv"
    PiWriter(env, "venv-short").user("Recreate the venv with python 3.12").assistant("Recreated.").save()
    assert "venv-short" in search_ids(capsys, "virtualenv python")


def test_a_session_whose_name_holds_every_word_comes_before_sessions_that_only_say_them(env, capsys):
    # A user remembers a session by its title (what the agent's resume list shows): a session whose
    # name holds every word ranks above the ones whose talk says them more often, after the words
    # written together.
    w = PiWriter(env, "titled")
    w.user("The accounts page spins forever; add a check.").assistant("Added a spinner assertion.")
    w.entry("session_info", name="YNAB accounts loading state test").save()
    for i in range(3):
        PiWriter(env, "talky-%d" % i).user(
            "The ynab import: loading state is wrong, the state test fails while loading. " * 3 + "word%d" % i
        ).assistant("The loading state test for ynab passes now.").save()
    PiWriter(env, "together").user("Write the ynab loading state test first.").save()
    data = search_json(capsys, "ynab loading state test")
    assert [r["sessionId"] for r in data["results"]][:2] == ["together", "titled"]
    assert data["results"][1]["matchedAllTerms"] is True
    code, out, _ = run(capsys, "search", "ynab loading state test", "--json", "--fields", "full")
    assert json.loads(out)["results"][1]["stage"] == "words in the name"


def test_part_of_a_camelcase_name_finds_it_and_marks_the_part(vocab_corpus, capsys):
    data = search_json(capsys, "payment intent webhook")
    top = data["results"][0]
    assert top["sessionId"] == "stripe-hook"
    assert top["matches"] and "**" in top["matches"][0]["snippet"]
    assert search_json(capsys, "handlePaymentIntentWebhook")["results"][0]["sessionId"] == "stripe-hook"


def test_a_stemmed_only_match_lists_the_chunk_with_the_word_marked(vocab_corpus, capsys):
    top = search_json(capsys, "simplify compaction")["results"][0]
    assert top["sessionId"] == "simplify-flake"
    assert any("**simplified**" in m["snippet"] for m in top["matches"])


def test_a_short_word_whose_stem_porter_changed_is_marked(env, capsys):
    # porter stems day -> dai and keys -> kei: the matcher looked for tokens starting "dai"/"kei",
    # found none, and the session (found by the index) was listed with no match marked.
    PiWriter(env, "rotated").user("Rotate the API keys every ninety days").assistant("Done: a key lives 90 days now.").save()
    for query, marked in (("keys", "**keys**"), ("day", "**days**"), ("key rotation day", "**key**")):
        top = search_json(capsys, query)["results"][0]
        assert top["sessionId"] == "rotated" and any(marked in m["snippet"] for m in top["matches"]), (query, top)


def test_the_part_finder_steps_over_runs_and_still_finds_the_part_after_them():
    # Runs of one case are stepped over at once (no part starts inside them), not letter by letter;
    # the part right after a run must still be found, as the index splits it.
    m = sesame.Matcher(sesame.Query("handle"))
    for text, part in (("x" * 5000 + "Handle", "Handle"), ("A" * 5000 + "Handle", "Handle"),
                       ("HANDLE" * 800 + "Handle", "Handle"), ("handleHandle", "handle")):
        spans = m.spans(text)
        assert spans and text[spans[-1][0]:spans[-1][1]] == "Handle" if part == "Handle" else spans[0][:2] == (0, 6), text[:20]
        assert m.words_in(text) == {0}
    assert sesame._after_run("abc1Def", 0) == 4 and sesame._after_run("ABCDef", 0) == 3 and sesame._after_run(".x", 0) == 1


def test_a_prefix_does_not_match_other_words_that_share_its_stem(vocab_corpus, capsys):
    m = sesame.Matcher(sesame.Query("tuning"))
    assert m.spans("we went to the tundra") == [] and m.spans("after tuning it") != []


def test_every_part_of_a_camelcase_name_is_marked_and_found_under_tools(env, capsys):
    # The index has each part of a name (handle, payment...; HTTP, server); the matcher marked only
    # capitalised parts after a lower-case letter: a session found by a name's first part (handle,
    # parse) or an acronym (HTTP) was listed with no match, and --tool left it out.
    w = PiWriter(env, "names")
    w.user("wire the webhook").tool("edit", {"path": "hook.ts", "newText": "export function handlePaymentIntentWebhook(e) {}\n"
                                             "const srv = new HTTPServer(parseJSON(cfg))"}, "edited")
    w.save()
    for query, marked in (("handle", "**handle**"), ("parse", "**parse**"), ("http", "**HTTP**"), ("json", "**JSON**")):
        for extra in ((), ("--tool", "edit")):
            top = search_json(capsys, query, *extra)["results"]
            assert top and top[0]["sessionId"] == "names", (query, extra)
            assert any(marked in m["snippet"] for m in top[0]["matches"]), (query, extra, top[0]["matches"])


def test_a_session_in_turkish_capitals_is_found_and_marked(env, capsys):
    # İ is the one letter whose lower case is two characters: a session whose best part held many
    # of them before the word searched for made every search that ranked it fail (IndexError).
    w = PiWriter(env, "turkish")
    w.user("İSTANBUL İZMİR İNDİRİM İÇİN İLK İŞ " * 4 + "kampanya")
    w.assistant("İSTANBUL şubesi için kampanya hazır")
    w.save()
    for query, marked in (("kampanya", "**kampanya**"), ("istanbul", "**İSTANBUL**"), ("izmir", "**İZMİR**")):
        top = search_json(capsys, query)["results"]
        assert top and top[0]["sessionId"] == "turkish", query
        assert any(marked in m["snippet"] for m in top[0]["matches"]), (query, top[0]["matches"])


def test_the_matchers_one_scan_per_needle_finds_what_its_scans_per_kind_find():
    """words_in_each scans a part once per needle and tells in Python what starts there (a token, a
    camelCase part, a joined word); the scans per kind it replaced (and that spans() and parts with
    accents still use) are the reference: the same words for every chunk, on camelCase names,
    acronyms, joined words, capitals, digits, non-ASCII letters, CJK and accents (those parts take
    the old way), and needles that overlap themselves (which the one scan leaves to the old way)."""
    import random
    rnd = random.Random(5)
    pool = ["a", "ab", "Ab", "AB", "aB", " ", "\n", "-", "_", ".", "0", "9", "value", "Value", "VALUE", "vaLue",
            "returnValue", "getReturnValue", "Object", "webSocket", "WebSocket", "websocket", "HTTPServer", "OAuth2Client",
            "parseJSON", "JSONParser", "file", "File", "notFound", "days", "Days", "keys", "KEYS", "aba", "tit",
            "é", "ß", "İ", "中文", "用", "React", "→", "“", "naïve", "x\u0301ab",
            "max", "Max", "imum", "Imum", "maximum", "maxiMum", "MaxiMum", "maxImumaximum", "test", "Test", "tesT",
            "TestTest", "testTest", "tEst"]
    # (maximum and test can overlap themselves, their needles cannot: they stay on the one scan)
    queries = ["value", "return value object", "websocket server", "oauth client", "json parse", "file not found",
               "days keys", "aba tit", "http server", "ret*", "react", "naive", "b-a", "maximum", "test maximum",
               "maximum value", "testtest"]
    fast, overlapping = 0, 0
    for _ in range(4000):
        q = " ".join(rnd.sample(queries, rnd.randint(1, 3)))
        texts = ["".join(rnd.choice(pool) for _ in range(rnd.randint(0, 40))) for _ in range(rnd.randint(1, 4))]
        query = sesame.Query(q)
        for w in query.words:
            w.df = 5
        m = sesame.Matcher(query)
        got = m.words_in_each(texts)
        fast += m.scans is not None
        overlapping += m.scans is not None and any(sesame._overlaps_itself(w) for _, w in m.joined)
        m.scans = None   # the scans per kind
        assert got == m.words_in_each(texts), (q, texts)
    assert fast > 2400 and overlapping > 400


def test_the_matcher_finds_each_token_that_starts_with_a_needle_and_none_inside_a_token():
    """The matcher finds the tokens that begin like a query word's stem with one regular expression
    per needle (for speed). What it finds is checked here against a plain loop over the text: every
    place a needle starts that is not inside a token (not after a letter, digit or an accent that
    unicode61 keeps in a token: "x\u0301ab" is one token), once, to the end of its token; texts of
    overlapping needles, needles inside one another, runs of one letter, camelCase capitals."""
    import random
    rnd = random.Random(11)

    def token_char(c):
        return (c.isalnum() and c != "_") or re.match("[%s]" % sesame._ACCENTS, c) is not None

    checked = 0
    for _ in range(3000):
        text = "".join(rnd.choice("aabcAB \n-_\u0301\ue001é") for _ in range(rnd.randint(0, 60)))
        words = sorted({"".join(rnd.choice("abc") for _ in range(rnd.randint(1, 4))) for _ in range(rnd.randint(1, 3))})
        query = sesame.Query(" ".join(words))
        for w in query.words:
            w.df = 5
        m = sesame.Matcher(query)
        low = text.lower()
        want = set()
        for i in range(len(low)):
            if i and token_char(low[i - 1]):
                continue  # inside a token
            for n in m.needles:
                if low.startswith(n, i):
                    end = i + len(n)
                    while end < len(low) and token_char(low[end]):
                        end += 1
                    want.add((i, end))
        assert set(m._token_spans(low)) == want, (text, words)
        checked += bool(want)
    assert checked > 1000  # (most texts hold some)
    # Each match once, where needles start one token or camelCase part ("a and": `A` and `And`)
    for _ in range(1000):
        text = "".join(rnd.choice(["And", "A", "and", "a", "AND", "x", " ", "Anda", "1"]) for _ in range(rnd.randint(1, 12)))
        query = sesame.Query(rnd.choice(["a and", "and", "an* a", "and a"]))
        for w in query.words:
            w.df = 5
        spans = sesame.Matcher(query).spans(text)
        assert len(spans) == len(set(spans)), (text, spans)


def test_the_words_of_a_parts_chunks_are_found_in_one_scan_as_chunk_by_chunk():
    """best_chunks asks which query words each chunk of a part holds with one scan over the chunks
    joined: a word never spans two chunks (handlePay|mentIntent), and each chunk gets its own words."""
    texts = ["handlePay", "mentIntent here", "the Payment was retried", "İstanbul payments", "node-v20 works",
             "nothing at all", "", "WebSocketServer and HTTPServer", "paymentintent", "a node, no version",
             "İİİİİİİİİİİİ İNDİRİM payment"]
    for q in ("payment", "payment intent", "websocket server", "node-v20", "pay*", "istanbul", "retry payment"):
        query = sesame.Query(q)
        for w in query.words:
            w.df = 5
        m = sesame.Matcher(query)
        each = m.words_in_each(texts)
        assert each == [m.words_in(t) for t in texts], q
        assert each == [{i for _, _, i in m.spans(t)} for t in texts], q   # (İstanbul too: its lower case is longer)
    m = sesame.Matcher(sesame.Query("payment"))
    assert m.words_in_each(texts)[:3] == [set(), set(), {0}]


def test_a_hyphenated_word_of_a_command_is_found_under_tools(vocab_corpus, capsys):
    data = search_json(capsys, "publish-release", "--tools")
    assert [r["sessionId"] for r in data["results"]] == ["release-script"]
    assert data["results"][0]["matches"][0]["kind"] == "tool"
    assert search_json(capsys, "publish-release", "--tool", "bash")["results"][0]["sessionId"] == "release-script"


def test_a_function_word_is_counted_through_only_when_it_ranks(vocab_corpus, capsys, monkeypatch):
    """How common "the" is (FTS5 walks up to half its documents: 1-2 ms at 1 GB) matters only when
    no other word ranks: "the docker" ranks by docker; "the" alone by itself."""
    counted = []
    original = sesame.Store.doc_count

    def counting(store, fts, limit=3):
        if limit > 3:
            counted.append(fts)
        return original(store, fts, limit)
    monkeypatch.setattr(sesame.Store, "doc_count", counting)
    assert "target-common" in search_ids(capsys, "the docker")
    assert '"the"' not in counted and '"docker"' in counted
    del counted[:]
    assert search_ids(capsys, "the")
    assert '"the"' in counted


def test_a_servers_words_counted_two_at_a_time_rank_as_when_counted_one_by_one(vocab_corpus, capsys, monkeypatch):
    """An MCP server counts a question's words on its two connections at once (Store.count_ahead),
    each in full, once: its pages are those of the command line, which counts them one after the
    other, up to half the documents (the stages keep the rarest common words, a misspelt word is
    corrected, a function word is counted only when it ranks)."""
    queries = ["fix the docker test error", "docker node service build", "kuberntes ingres timeout",
               "test error docker node build the", "simplified flake overlays", "the"]
    counts = os.path.join(os.environ["SESAME_DATA_DIR"], "counts")
    made = []
    original = sesame._Prefetch

    def recording(path, tasks, con=None):
        made.extend(t[2][0] for t in tasks if "count(*)" in t[1])
        return original(path, tasks, con)
    monkeypatch.setattr(sesame, "_Prefetch", recording)
    cli = []
    for q in queries:
        if os.path.exists(counts):
            os.remove(counts)
        cli.append(search_ids(capsys, q, "--limit", "20"))
    assert not made   # (a command keeps no second connection)
    os.remove(counts)
    warm = sesame.WarmIndex()
    try:
        for q, expected in zip(queries, cli):
            reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "search", "arguments": {"query": q, "limit": 20, "max_chars": 0}}}, warm)
            assert [r["sessionId"] for r in reply["result"]["structuredContent"]["results"]] == expected, q
        assert sorted(made) == sorted(set(made)) and {'"docker"', '"node"', '"service"', '"build"'} <= set(made)
        assert '"the"' not in made   # (a function word, counted by itself only when it alone ranks)
    finally:
        warm.close()


def test_the_next_stage_fetched_alongside_the_first_gives_the_same_results(vocab_corpus, capsys, monkeypatch):
    """When every word is in thousands of documents the second stage is fetched on a second
    connection while the first runs (_Prefetch): pages, their order and paging stay exactly those of
    stage after stage."""
    made = []
    original = sesame._Prefetch

    def counting(*a):
        made.append(a)
        return original(*a)
    monkeypatch.setattr(sesame, "_Prefetch", counting)
    queries = ["fix the docker error", "test error docker", "docker build node", "the node service error", "fix test"]
    pages = [("--limit", "3"), ("--limit", "3", "--offset", "3"), ("--limit", "20")]

    def results():
        return [search_json(capsys, q, *page)["results"] for q in queries for page in pages]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 10 ** 9)
    alone = results()
    assert not made
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 1)
    assert results() == alone
    assert made  # (the path was taken)

    def failing(*a):  # no second connection or thread to be had: the stages run one after the other
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(sesame, "_Prefetch", failing)
    assert results() == alone


def test_the_stages_fetched_alongside_are_ranked_in_halves_on_both_connections_and_the_results_stay(
        vocab_corpus, capsys, monkeypatch):
    """A server (its second connection kept) and a command rank the words-together and every-word
    stages in two halves of the parts (RankingQuery.tasks): the thread takes the next half nobody
    took, the caller runs those left when it comes for a stage. Each half's best rows hold the best
    of all: pages, their order and paging stay those of stage after stage."""
    queries = ["fix the docker error", "test error docker", "docker build node", "the node service error", "fix test",
               "docker test error", "node version problem"]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 10 ** 9)
    alone = [search_json(capsys, q, "--limit", "20")["results"] for q in queries]
    made, here = [], []
    original, run = sesame._Prefetch, sesame.RankingQuery.run

    objects = []

    def recording(path, tasks, con=None):
        made.append([(stage, params[1:-1]) for stage, _, params, _ in tasks])
        objects.append(original(path, tasks, con))
        return objects[-1]

    def running(self, sql, params, deadline):   # (what the caller runs itself)
        here.append(sql)
        return run(self, sql, params, deadline)
    monkeypatch.setattr(sesame, "_Prefetch", recording)
    monkeypatch.setattr(sesame.RankingQuery, "run", running)
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 1)
    monkeypatch.setattr(sesame, "SPLIT_MIN_PARTS", 1)
    warm = sesame.WarmIndex()
    try:
        for q, page in zip(queries, alone):
            reply = sesame.call_tool({"name": "search", "arguments": {"query": q, "limit": 20, "max_chars": 0}}, warm)
            assert [r["sessionId"] for r in reply["structuredContent"]["results"]] == [r["sessionId"] for r in page], q
    finally:
        warm.close()
    halves = [t for tasks in made for t in tasks if t[1]]
    assert halves and all(len(tasks) % 2 == 0 for tasks in made)
    cut = halves[0][1][0]
    assert all(t[1] == [cut] for t in halves)   # (one cut: the middle part)
    # both connections ranked halves: the caller some, the thread the others it ran
    by_caller = sum("rowid <= ?" in sql or "rowid > ?" in sql for sql in here)
    assert 0 < by_caller < sum(r is not None for p in objects for r in p.results)
    del made[:]
    assert [search_json(capsys, q, "--limit", "20")["results"] for q in queries] == alone
    assert made and all(params == [cut] for tasks in made for _, params in tasks)   # a command: in halves too


def test_a_phrase_whose_words_are_never_side_by_side_is_not_looked_for_and_the_results_stay(vocab_corpus, capsys,
                                                                                                  monkeypatch):
    """When every word of a phrase of three or more is in thousands of documents, the words-together
    stage first asks whether a pair of its neighbouring words is anywhere (Query.phrase_pairs): the
    phrase is not run where one is not (FTS5 would read every word's positions in every document),
    and is where they all are. Pages, their order and their stages are those of every stage run."""
    ran = []
    rows, tasks = sesame.RankingQuery.rows, sesame.RankingQuery.tasks

    def recording(self, expr, limit, deadline):
        ran.append(expr)
        return rows(self, expr, limit, deadline)

    def fetching(self, stage, expr, *a, **kw):   # (a stage fetched alongside: run by either connection)
        ran.append(expr)
        return tasks(self, stage, expr, *a, **kw)
    monkeypatch.setattr(sesame.RankingQuery, "rows", recording)
    monkeypatch.setattr(sesame.RankingQuery, "tasks", fetching)
    queries = ["node version problem", "service node docker", "error docker build test", "build docker error node",
               "docker test error", "fix the test error", "test node version problem", "version node problem"]
    pages = [("--limit", "3"), ("--limit", "3", "--offset", "3"), ("--limit", "20")]

    def results():
        return [search_json(capsys, q, *page)["results"] for q in queries for page in pages]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 10 ** 9)
    every_stage = results()
    assert '"service node docker"' in ran and '"node version problem"' in ran
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 1)
    del ran[:]
    assert results() == every_stage
    # "node docker" is in no session: that phrase is not looked for; "docker test error" is (its
    # pairs are all there), and it ranks its session first, as a phrase
    assert '"service node docker"' not in ran and '"version node problem"' not in ran
    assert '"node version problem"' in ran and '"docker test error"' in ran
    top = search_json(capsys, "docker test error")["results"][0]
    assert (top["sessionId"], top["stage"]) == ("target-common", "words together")
    assert all(r["stage"] != "words together" for r in search_json(capsys, "service node docker")["results"])


def test_a_long_questions_last_stage_fetched_alongside_the_others_gives_the_same_results(env, capsys, monkeypatch):
    """A long question runs every stage; its last (any word) is fetched on a second connection
    while the others run, as it runs when a stage before it was cut (its LIMIT left rows out). Its
    rows are used only then: pages, their order and paging stay those of stage after stage, and
    where no stage was cut the last runs as before."""
    rnd = random.Random(7)
    words = ["docker", "layer", "cache", "node", "build", "image", "registry", "timeout", "alpine", "pnpm"]
    for i in range(70):   # enough sessions holding the words for the stages' LIMITs to leave some out
        w = PiWriter(env, "lq-%02d" % i, cwd="/home/dev/app%d" % (i % 5), start="2026-02-%02dT10:00:00.000Z" % (1 + i % 27))
        w.user("why does the %s fail, %s" % (" ".join(rnd.sample(words, 4)), " ".join(rnd.sample(words, 3))))
        w.assistant("the %s was the cause, see the %s" % tuple(rnd.sample(words, 2)))
        w.save()
    PiWriter(env, "lq-rare", cwd="/home/dev/rare").user("the quokka okapi narwhal tapir wombat note").save()
    made, ran = [], []
    original, rows = sesame._Prefetch, sesame.RankingQuery.rows

    def counting(path, tasks, con=None):
        made.extend(params[0] for _, _, params, _ in tasks)   # (a task's parameters: the stage's expression first)
        return original(path, tasks, con)

    def running(self, expr, limit, deadline):
        ran.append(expr)
        return rows(self, expr, limit, deadline)
    monkeypatch.setattr(sesame, "_Prefetch", counting)
    monkeypatch.setattr(sesame.RankingQuery, "rows", running)
    queries = ["why does the docker layer cache fail with the node build image",
               "registry timeout on the alpine image with pnpm and the docker cache",
               "the quokka and the okapi met a narwhal, a tapir and a wombat"]   # (no stage cut: the last runs as before)
    pages = [("--limit", "3"), ("--limit", "3", "--offset", "3"), ("--limit", "20")]

    def results():
        return [search_json(capsys, q, *page)["results"] for q in queries for page in pages]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 10 ** 9)
    alone = results()
    assert not made and all(alone[k * len(pages)] for k in range(len(queries)))
    del ran[:]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 1)
    assert results() == alone
    fetched = [e for e in made if " NOT " in e]    # (the long questions' last stages)
    assert any(e not in ran for e in fetched)        # its rows were used: this connection did not run it
    assert any("quokka" in e for e in fetched) and not any("quokka" in e and " NOT " in e for e in ran)   # not cut: as before

    def failing(*a):  # no second connection or thread to be had: the stages run one after the other
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(sesame, "_Prefetch", failing)
    assert results() == alone


def test_the_mcp_server_fetches_the_next_stage_on_one_kept_connection_that_sees_every_change(vocab_corpus, env,
                                                                                             capsys, monkeypatch):
    """The server keeps the second connection a prefetch runs on (Store.spare) from call to call: its
    pages are those of stage after stage, and a session written meanwhile by another process is in
    the stage it fetches."""
    made = []
    original = sesame._Prefetch

    def recording(*a):
        made.append(a[-1])   # the connection it was given (None: it opens its own)
        return original(*a)
    monkeypatch.setattr(sesame, "_Prefetch", recording)
    queries = ["fix the docker error", "docker build node", "the node service error", "fix test"]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 10 ** 9)
    alone = [search_json(capsys, q, "--limit", "20")["results"] for q in queries]
    monkeypatch.setattr(sesame, "PREFETCH_MIN_DOCS", 1)
    warm = sesame.WarmIndex()

    def warm_ids(query):
        return [r["sessionId"] for r in sesame.call_tool({"name": "search", "arguments": {"query": query, "limit": 20, "max_chars": 0}},
                                                         warm)["structuredContent"]["results"]]
    try:
        assert [warm_ids(q) for q in queries] == [[r["sessionId"] for r in page] for page in alone]
        assert made and made[0] is not None and all(con is made[0] for con in made)   # one kept connection
        # another process adds a session holding both words apart (found by the fetched stage only)
        PiWriter(env, "late-one", cwd="/home/dev/late").user("the docker cache, and later a node upgrade").save()
        assert run(capsys, "index")[0] == 0
        assert "late-one" in warm_ids("docker node")
        assert all(con is made[0] for con in made)
    finally:
        warm.close()
    assert warm.store is None


def test_a_long_question_ranks_like_its_keywords(vocab_corpus, capsys):
    q = "where did we figure out why the kubernetes ingress kept timing out for the big uploads"
    assert search_json(capsys, q)["results"][0]["sessionId"] == "k8s-ingress"


def test_every_result_lists_a_matching_chunk_or_its_name_with_a_marked_word(corpus, capsys):
    for q in ("carousel", "nix flake simplify", "kubernetes autoscaler", "ECONNREFUSED", "get_user_by_email",
              "landing page"):
        for r in search_json(capsys, q)["results"]:
            assert r["matches"] and any("**" in m["snippet"] for m in r["matches"]), (q, r["sessionId"])


# ==================================================================================================
# Search: filters
# ==================================================================================================

def test_cwd_filter_includes_subdirectories_only(corpus, capsys):
    assert set(search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/api")) == {"cccc3333-ci", "dddd4444-users"}
    assert search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/api/services") == ["dddd4444-users"]
    assert search_ids(capsys, "helper", "--cwd", "/home/dev/ap") == []


def test_cwd_filter_case_is_the_file_systems_for_the_folder_and_below(corpus, tmp_path, capsys, monkeypatch):
    both = {"cccc3333-ci", "dddd4444-users"}
    # A case-sensitive file system (Linux): /home/dev/API is another folder, and so is what is below it.
    monkeypatch.setattr(sesame, "case_insensitive_fs", lambda path: False, raising=False)
    assert set(search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/api")) == both
    assert search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/API") == []
    assert search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/Api/services") == []
    # A case-insensitive one (macOS, Windows): the same folder whatever the case, below it too.
    monkeypatch.setattr(sesame, "case_insensitive_fs", lambda path: True)
    assert set(search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/API")) == both
    assert search_ids(capsys, "helper lookup health", "--cwd", "/HOME/dev/api/Services") == ["dddd4444-users"]
    assert search_ids(capsys, "helper", "--cwd", "/home/dev/AP") == []
    monkeypatch.undo()
    folder = tmp_path / "CaseProbe"
    folder.mkdir()
    other = tmp_path / "cASEpROBE"
    assert sesame.case_insensitive_fs(str(folder / "not-there" / "x")) is other.exists()


def test_cwd_filter_on_a_windows_folder_matches_either_slash_and_any_case(env, capsys):
    # Sessions recorded on Windows, searched on any system; one agent wrote both c:\ and C:\.
    for sid, cwd in (("win-back", "C:\\Users\\linhl\\Documents\\master"), ("win-lower", "c:\\Users\\linhl\\Documents\\master"),
                     ("win-fwd", "C:/Users/linhl/tools"), ("win-other", "C:\\Users\\linhlx"), ("posix", "/Users/linhl")):
        w = PiWriter(env, sid, cwd=cwd)
        w.user("the agents manage view")
        w.save()
    every = {"win-back", "win-lower", "win-fwd"}
    for folder in ("C:\\Users\\linhl", "C:/Users/linhl", "c:\\users\\LINHL\\", "c:/Users/linhl/"):
        assert set(search_ids(capsys, "agents manage", "--cwd", folder)) == every, folder
    assert set(search_ids(capsys, "agents manage", "--cwd", "c:/users/linhl/documents/MASTER")) == {"win-back", "win-lower"}
    assert len(search_ids(capsys, "agents manage", "--cwd", "C:\\")) == 4
    assert search_ids(capsys, "agents manage", "--cwd", "D:\\Users\\linhl") == []


def test_a_session_dated_in_the_far_future_is_taken_as_read_now_not_as_newer_than_every_other(env, capsys):
    """A record dated 2099 or 2500 (a clock set wrong, a damaged or made-up time) would make its
    session the newest for ever and pass every --after: its times are at most a day after it was
    indexed. A real date stays as written; a year before 1000 is written with four digits, as it
    sorts among the others."""
    import datetime
    PiWriter(env, "future", start="2500-06-01T23:00:00.000Z").user("the quokka migration plan").save()
    PiWriter(env, "soon", start="2099-01-01T10:00:00.000Z").user("the quokka migration notes").save()
    PiWriter(env, "past", start="2026-03-10T09:00:00.000Z").user("the quokka migration review").save()
    data = search_json(capsys, "quokka migration", "--limit", "10")
    when = {r["sessionId"]: r["modified"] for r in data["results"]}
    tomorrow = sesame.iso(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1, minutes=5))
    assert set(when) == {"future", "soon", "past"}
    assert when["future"] <= tomorrow and when["soon"] <= tomorrow and when["future"] > when["past"]
    assert when["past"].startswith("2026-03-10T09:")
    assert search_ids(capsys, "quokka migration", "--after", "2090-01-01") == []
    assert set(search_ids(capsys, "quokka migration", "--before", "2090-01-01")) == {"future", "soon", "past"}
    assert sesame.norm_time("0001-01-01T09:00:00Z") == "0001-01-01T09:00:00.000Z" < when["past"]


def test_date_filters_compare_last_activity(corpus, capsys):
    ids = search_ids(capsys, "the", "--after", "2026-04-01", "--limit", "50")
    assert "aaaa1111-nix" not in ids and "cdcd8888-k8s" in ids
    ids = search_ids(capsys, "the", "--before", "2026-02-01", "--limit", "50")
    assert ids == ["aaaa1111-nix"]
    code, _, err = run(capsys, "search", "x", "--after", "someday")
    assert code == 2 and "cannot read the date" in err


def test_tool_filters(corpus, capsys):
    assert search_ids(capsys, "E403", "--tools") == ["efef9999-toolonly"]
    assert search_ids(capsys, "ECONNREFUSED", "--tool", "bash") == ["cccc3333-ci"]
    assert search_ids(capsys, "ECONNREFUSED", "--tool", "read") == []
    assert search_ids(capsys, "currency", "--path", "invoice_pdf") == ["eeee5555-billing"]
    assert search_ids(capsys, "currency", "--path", "nowhere.py") == []


def test_agent_filter(corpus, capsys):
    assert search_ids(capsys, "carousel", "--agent", "pi") == ["bbbb2222-carousel"]
    code, _, err = run(capsys, "search", "carousel", "--agent", "nosuch")
    assert code == 2 and "unknown agent" in err


def test_agent_filter_takes_the_names_people_and_agents_use(env, tmp_path, capsys):
    # An agent asked for "my Claude Code session about the heron pond" passes `--agent claude-code`
    # or `"Claude Code"`: both were "unknown agent" (only the id `claude` was taken).
    PiWriter(env, "pi-heron").user("the heron feeder is empty").save()
    sid = "11111111-2222-4333-8444-555555555555"
    claude = tmp_path / "claude-projects"
    write_jsonl(claude / "-home-pond" / (sid + ".jsonl"), [dict(cc_cl_user(
        "u1", "2026-05-01T10:00:00.000Z", "the heron pond pump hums"), sessionId=sid)])
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "claude", "path": str(claude)}]}, tmp_path)
    assert sorted(search_ids(capsys, "heron")) == sorted(["pi-heron", sid])
    for name in ("claude", "Claude Code", "claude-code", "claude_code", "anthropic claude", "CLAUDE CODE CLI"):
        assert search_ids(capsys, "heron", "--agent", name) == [sid], name
    for name in ("pi", "PI", "pi agent"):
        assert search_ids(capsys, "heron", "--agent", name) == ["pi-heron"], name
    for name in ("claud", "code", "cli", "open"):
        code, _, err = run(capsys, "search", "heron", "--agent", name)
        assert code == 2 and "unknown agent" in err, name
    code, out, err = run(capsys, "setup", "gemini-cli", "--dry-run", "--json")   # setup takes them too
    assert code == 0, err


def test_limit_and_offset_page_without_gaps(corpus, capsys):
    all_ids = search_ids(capsys, "the", "--limit", "50", "--max-chars", "0")
    pages = [search_ids(capsys, "the", "--limit", "3", "--offset", str(o), "--max-chars", "0")
             for o in range(0, len(all_ids), 3)]
    assert [i for p in pages for i in p] == all_ids


def test_a_long_question_pages_exactly_when_its_first_stage_has_more_sessions_than_a_page_asks(env, capsys):
    """A long question re-ranks the first sessions of every stage; with 30 sessions holding every
    word, a small page fetched fewer of them, and the rest came back from the looser stage into its
    re-ranked head: page 1 then differed from the first rows of a long list."""
    words = "where did we configure the backup retention policy for the nightly snapshots"
    for i in range(30):
        w = PiWriter(env, "all-%02d" % i, cwd="/home/dev/a%d" % i)
        w.user(words + " " + "filler text " * (i * 7)).save()
    for i in range(8):
        w = PiWriter(env, "some-%02d" % i, cwd="/home/dev/s%d" % i)
        w.user("the nightly snapshots: backup retention policy configured, number %d" % i).save()
    full = search_ids(capsys, words, "--limit", "40", "--max-chars", "0")
    paged = [i for o in range(0, 40, 4) for i in search_ids(capsys, words, "--limit", "4", "--offset", str(o),
                                                              "--max-chars", "0")]
    assert len(full) == 38 and paged == full


def test_sessions_that_tie_page_exactly(env, capsys):
    """Sessions with the same text have the same score: the ranking cuts its rows to a LIMIT before
    it joins them to their sessions, so a tie must be broken the same way in every page (one total
    order), or a page repeats or skips a session."""
    for i in range(25):
        PiWriter(env, "twin-%02d" % i, cwd="/home/dev/t%d" % (i % 3)).user("roll the canary back with helm").save()
    full = search_ids(capsys, "canary helm", "--limit", "40", "--max-chars", "0")
    paged = [i for o in range(0, 28, 4) for i in search_ids(capsys, "canary helm", "--limit", "4", "--offset", str(o),
                                                              "--max-chars", "0")]
    assert len(full) == 25 and len(set(full)) == 25 and paged == full


def follow_pages(capsys, query, *argv):
    """Every result id, following nextOffset from the first page until hasMore is false."""
    ids, offset = [], 0
    for _ in range(100):
        code, out, err = run(capsys, "search", query, "--json", "--offset", str(offset), *argv)
        assert code == 0, err
        data = json.loads(out)
        ids += [r["sessionId"] for r in data["results"]]
        if not data["hasMore"]:
            return ids
        assert data["nextOffset"] > offset, "paging must move on"
        offset = data["nextOffset"]
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("budget", ["1", "150", "600", "2000"])
def test_paging_with_any_budget_ends_and_returns_every_result_once(corpus, capsys, budget):
    everything = search_ids(capsys, "the", "--limit", "50", "--max-chars", "0")
    assert len(everything) >= 5
    assert follow_pages(capsys, "the", "--limit", "4", "--max-chars", budget) == everything


def test_the_default_budget_also_applies_with_limit(corpus, capsys):
    code, out, _ = run(capsys, "search", "the", "--json", "--limit", "50", "--fields", "full")
    assert len(out) <= sesame.DEFAULT_MAX_CHARS


# ==================================================================================================
# Output
# ==================================================================================================

def test_json_output_contract(corpus, capsys):
    code, out, _ = run(capsys, "search", "carousel", "--json")
    data = json.loads(out)
    assert data["query"] == "carousel" and data["resultCount"] == 1
    r = data["results"][0]
    for key in ("sessionId", "source", "path", "cwd", "name", "score", "created", "matchedSnippet"):
        assert key in r
    assert r["source"] == r["agent"] == "pi" and r["name"] == "Landing page carousel"
    assert "**carousel**" in r["matchedSnippet"].lower()
    assert r["matches"][0]["seq"] >= 0 and r["matches"][0]["kind"] in ("user", "assistant")
    assert r["resumeCommand"] == "pi --session " + r["path"]
    assert r["created"].endswith("Z")


def test_human_output_shows_count_id_name_date_cwd_and_snippet(corpus, capsys):
    code, out, _ = run(capsys, "search", "carousel")
    assert out.startswith('Found 1 session matching "carousel"')
    assert "bbbb2222 (Landing page carousel) - 2026-02-01" in out
    assert "/home/dev/site" in out and "**carousel**" in out.lower()
    assert "\x1b[" not in out  # NO_COLOR and not a terminal


def test_human_output_says_when_no_session_has_every_word_and_suggests_the_sessions_words(corpus, capsys):
    hint = "(no session has all of these words: try the words the session would have used"
    out = run(capsys, "search", "kubernetes autoscaler permissions walrus")[1]
    assert out.count(hint) == 1 and "cdcd8888" in out          # the results with most words still come
    assert hint not in run(capsys, "search", "kubernetes autoscaler")[1]
    out = run(capsys, "search", "walrus platypus")[1]   # nothing at all: "any", not "all"
    assert out.startswith('Found 0 sessions') and "(no session has any of these words: try" in out


# Terminal escape sequences a session can carry: an OSC 52 clipboard write, a screen clear, colour,
# a bell, a bare carriage return, an 8-bit CSI and a right-to-left override.
ESCAPES = "\x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[2J\x1b[H \x1b[31mred\x1b[0m \x07 over\rwrite \x9b6n \u202eevil"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_escape_sequences_from_sessions_are_never_printed_raw(env, capsys):
    w = PiWriter(env, "escapes-1", cwd="/home/dev/\x1b[2Jproj")
    w.user("the pelican report %s" % ESCAPES)
    w.tool("bash", {"command": "ls --color"}, "pelican output " + ESCAPES)
    w.entry("session_info", name="pelican \x1b]0;title\x07 name")
    w.save()
    with open(os.path.join(os.path.dirname(w.path), "odd\x1b[2Jname.jsonl"), "w") as f:
        f.write("not a session\n")
    code, _, err = run(capsys, "index")
    assert code == 0 and "odd^[[2Jname.jsonl" in err and not RAW_CONTROL.search(err)
    for argv, expect in ((("search", "pelican"), "^[]52;c;ZWNobyBwd25lZA==^G"), (("search", "pelican", "--tools"), "^[[2J"),
                         (("show", "escapes-1"), "^[[31mred^[[0m"), (("show", "escapes-1", "--all"), "\\x9b6n"),
                         (("status",), "index:"), (("search", "pelican \x1b[2J"), "pelican ^[[2J"),
                         (("forget", "--list"), "")):
        code, out, err = run(capsys, *argv)
        assert code == 0 and expect in out, (argv, out, err)
        assert not RAW_CONTROL.search(out) and not RAW_CONTROL.search(err), (argv, out, err)
    code, out, _ = run(capsys, "search", "pelican", "--json")
    assert not RAW_CONTROL.search(out.rstrip("\n"))
    r = json.loads(out)["results"][0]
    assert "\x1b]52;c;" in r["matchedSnippet"] and "\x9b" in r["matchedSnippet"] and r["cwd"] == "/home/dev/\x1b[2Jproj"
    code, out, _ = run(capsys, "show", "escapes-1", "--json")
    assert not RAW_CONTROL.search(out.rstrip("\n")) and "\u202eevil" in json.loads(out)["chunks"][0]["text"]


def test_a_newline_in_a_name_folder_or_file_name_stays_inside_its_field(env, capsys):
    # Human output is one field per line: a file name, folder or session name holding a line break
    # (all legal on disk) shows it as \\n instead of breaking the layout (or forging a line).
    w = PiWriter(env, "newline-names", cwd="/home/dev/two\nlines")
    w.user("the tapestry of odd names").entry("session_info", name="first\nsecond").save()
    odd = os.path.join(os.path.dirname(w.path), "fake\nresume: rm -rf.jsonl")
    os.rename(w.path, odd)
    with open(os.path.join(os.path.dirname(w.path), "not\nsession.jsonl"), "w") as f:
        f.write("not a session\n")
    code, _, err = run(capsys, "index")
    assert code == 0 and "  not indexed: %s: " % os.path.join(os.path.dirname(w.path), "not\\nsession.jsonl").replace(
        "\n", "\\n") in err.splitlines()[1], err
    code, out, _ = run(capsys, "search", "tapestry")
    assert out.splitlines()[2].startswith("1. newline- (first\\nsecond) - 2026-03-10"), out
    assert "  /home/dev/two\\nlines" in out.splitlines()
    code, out, _ = run(capsys, "show", "newline-names")
    lines = out.splitlines()
    assert "path:     " + odd.replace("\n", "\\n") in lines and "cwd:      /home/dev/two\\nlines" in lines
    assert "name:     first\\nsecond" in lines and not any(l.startswith("resume: rm") for l in lines), out
    code, out, _ = run(capsys, "search", "tapestry", "--json")
    r = json.loads(out)["results"][0]
    assert r["path"] == odd and r["cwd"] == "/home/dev/two\nlines"  # JSON keeps them exact


@pytest.mark.parametrize("preset,keys", [
    ("minimal", ["sessionId", "shortId", "agent", "host", "name", "title", "modified", "score", "resumeCommand", "fileDeleted",
                 "current"]),
    ("summary", ["sessionId", "shortId", "source", "agent", "host", "path", "cwd", "name", "title", "score", "matchedAllTerms",
                 "created", "modified", "parent", "matchedSnippet", "matches", "resumeCommand", "fileDeleted",
                 "current"]),
    ("full", ["sessionId", "shortId", "source", "agent", "host", "path", "cwd", "name", "title", "score", "matchedAllTerms", "created",
              "modified", "parent", "matchedSnippet", "matches", "resumeCommand", "fileDeleted", "current",
              "chunkCount", "stage", "matchedWords"]),
    ("name,score", ["name", "score"]),
])
def test_field_presets_give_exactly_their_keys(corpus, capsys, preset, keys):
    code, out, _ = run(capsys, "search", "upload bucket", "--json", "--fields", preset)
    results = json.loads(out)["results"]
    assert results and all(list(r) == keys for r in results)
    if preset == "summary":
        assert list(results[0]["matches"][0]) == ["seq", "kind", "tool", "snippet"]
    if preset == "full":
        assert {"seq", "kind", "role", "tool", "timestamp", "score", "snippet"} == set(results[0]["matches"][0])


def test_unknown_field_is_a_usage_error_listing_the_valid_ones(corpus, capsys):
    code, out, err = run(capsys, "search", "carousel", "--json", "--fields", "sessionId,colour")
    assert code == 2 and "colour" in err and "matchedSnippet" in err
    assert json.loads(out)["error"]["code"] == "usage"


@pytest.mark.parametrize("fmt", [[], ["--json"]])
@pytest.mark.parametrize("budget", [300, 600, 1200, 2500])
def test_max_chars_bounds_the_output_and_says_what_was_left_out(corpus, capsys, fmt, budget):
    code, full_out, _ = run(capsys, "search", "the", "--limit", "10", *fmt)
    code, out, _ = run(capsys, "search", "the", "--limit", "10", "--max-chars", str(budget), *fmt)
    assert code == 0
    if fmt and json.loads(out)["resultCount"] == 1 and len(out) > budget:
        assert json.loads(out)["truncated"]["overBudget"] is True   # one result always shows
    else:
        assert len(out) <= budget
    if budget >= len(full_out):
        assert out == full_out
    elif fmt:
        data = json.loads(out)
        assert data["truncated"]["maxChars"] == budget and data["hasMore"]
        assert data["nextOffset"] == data["resultCount"]
    else:
        assert "output limited to %d characters" % budget in out


def test_a_page_cut_to_the_budget_keeps_snippets_that_show_the_match(env, capsys):
    """When not every result fits in --max-chars, fewer results keep snippets that show the matched
    word: a page of results whose snippets were all cut to "…" told an agent nothing."""
    for i in range(10):
        w = PiWriter(env, "widget-%02d" % i, cwd="/home/dev/" + "/".join(["a-rather-long-folder-name"] * 4) + str(i))
        for k in range(3):
            w.user("Long talk before the word, " * 6 + "then the widget appears, and long talk after it. " * 4)
        w.save()
    code, out, _ = run(capsys, "search", "widget", "--json")
    data = json.loads(out)
    assert code == 0 and len(out) <= sesame.DEFAULT_MAX_CHARS and data["hasMore"]
    assert data["results"] and all("**widget**" in r["matchedSnippet"] for r in data["results"])


def test_a_page_measured_result_by_result_is_as_long_as_the_page_printed(env, capsys):
    """Whether the next result can still fit the budget is told from each result's JSON, measured
    once (_smallest_size): the sum is the length of the page printed, escapes and all."""
    for i in range(6):
        PiWriter(env, "gizmo-%d" % i).user("the gizmo \u202e控制 \x01 \"quoted\" \\ café " * (i + 1) + "gizmo end").save()
    assert run(capsys, "index")[0] == 0
    ctx = sesame.Context()
    data = sesame.search_sessions(ctx, "gizmo")
    assert len(data["results"]) == 6
    page = sesame.json_line(sesame._shortened(sesame.search_json(data), sesame.SNIPPET_WIDTHS[-1]))
    assert sesame._smallest_size(data, sesame.json_line, []) == len(page)
    text = lambda d: sesame.render_results(d, False)   # noqa: E731  (the text output: measured whole)
    shortest = sesame._shortened(sesame.search_json(data), sesame.SNIPPET_WIDTHS[-1])
    assert sesame._smallest_size(data, text, []) == len(text(shortest))


def test_default_search_output_stays_under_4000_characters(corpus, capsys):
    for i in range(20):
        PiWriter(corpus, "pad-%02d" % i).user("the same long words " * 40).save()
    for fmt in ([], ["--json"]):
        code, out, _ = run(capsys, "search", "the same long words", *fmt)
        assert code == 0 and len(out) <= 4000


def test_a_budget_smaller_than_one_result_still_shows_one_and_moves_on(corpus, capsys):
    code, out, err = run(capsys, "search", "the", "--json", "--max-chars", "20")
    data = json.loads(out)
    assert code == 0 and data["resultCount"] == 1 and data["hasMore"] and data["nextOffset"] == 1
    assert data["truncated"]["overBudget"] is True and data["results"][0]["matchedSnippet"] == "…"
    code, out, err = run(capsys, "search", "the", "--max-chars", "20")
    assert code == 0 and "one result is always shown" in out


def test_search_json_is_byte_stable(corpus, capsys):
    outs = {run(capsys, "search", "the", "--json", "--limit", "20", "--fields", "full")[1] for _ in range(3)}
    run(capsys, "index", "--full")
    outs.add(run(capsys, "search", "the", "--json", "--limit", "20", "--fields", "full")[1])
    assert len(outs) == 1


def test_a_session_without_a_name_is_called_by_its_first_prompt(corpus, capsys):
    # Most real Claude Code and Codex sessions have no name: the first line the user wrote says
    # which one it is (as the agents' own resume lists do); JSON keeps name null beside the title.
    assert "efef9999 (Run the deploy script.)" in run(capsys, "search", "zanzibar")[1]
    r = json.loads(run(capsys, "search", "zanzibar", "--json")[1])["results"][0]
    assert r["name"] is None and r["title"] == "Run the deploy script."
    named = json.loads(run(capsys, "search", "carousel", "--json")[1])["results"][0]
    assert named["title"] == named["name"] == "Landing page carousel"
    header = json.loads(show(capsys, "efef9999", "--json")[1])["session"]
    assert header["name"] is None and header["title"] == "Run the deploy script."
    assert show(capsys, "efef9999", "--format", "md")[1].startswith("# Run the deploy script.\n")


def test_missing_fts5_is_explained(monkeypatch):
    import sqlite3
    con = sqlite3.connect(":memory:")
    monkeypatch.setattr(sesame, "TOKENIZE", "no_such_tokenizer")
    with pytest.raises(sesame.SesameError) as e:
        sesame.check_fts5(con)
    assert "FTS5" in e.value.message and "Python" in e.value.hint


def test_script_runs_when_copied_and_renamed(tmp_path, env):
    target = tmp_path / "bin" / "sesame"
    target.parent.mkdir()
    target.write_bytes(open(os.path.join(HERE, "sesame.py"), "rb").read())
    target.chmod(0o755)
    r = subprocess.run([str(target), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "search" in r.stdout


# ==================================================================================================
# Show: one session as readable text or JSON
# ==================================================================================================

def name(w, text):
    return w.entry("session_info", name=text)


@pytest.fixture
def sessions(env, capsys):
    """A few named sessions, indexed; returns {short name: session file}."""
    files = {}
    w = PiWriter(env, "aaaa1111-nix", cwd="/home/dev/infra", start="2026-01-05T10:00:00.000Z")
    w.user("The flake.nix has grown into a mess of overlays.")
    w.assistant("I'll look at the modules first.", thinking="Overlays first, then the dev shell.")
    w.assistant(calls=[("call_1", "bash", {"command": "nix flake check\n--show-trace"})])
    w.result("call_1", "bash", "attribute 'overlay' missing", is_error=True)
    w.entry("compaction", summary="We removed three overlays and merged the modules.")
    w.user("Keep only the dev shell.")
    files["nix"] = name(w, "Simplify the nix flake").save()

    w = PiWriter(env, "cccc1111-carousel", cwd="/home/dev/site", start="2026-02-01T10:00:00.000Z")
    w.user("Build an image carousel for the landing page.")
    w.assistant("Added a Carousel component with autoplay.")
    files["carousel"] = name(w, "Landing page carousel").save()

    w = PiWriter(env, "cccc2222-billing", cwd="/home/dev/billing", start="2026-02-03T10:00:00.000Z")
    w.user("Export invoices as PDF.")
    w.assistant("Rendered the invoice with a template.")
    files["billing"] = name(w, "Invoice PDF export").save()

    w = PiWriter(env, "dddd3333-long", cwd="/home/dev/app", start="2026-03-01T10:00:00.000Z")
    for i in range(20):
        w.user("Question %d about the refactor: %s" % (i, "why " * 30))
        w.assistant("Answer %d: %s" % (i, "because " * 30))
    files["long"] = name(w, "Long refactor").save()
    assert run(capsys, "index")[0] == 0
    return files


def show(capsys, *argv):
    return run(capsys, "show", *argv)


def show_json(capsys, *argv):
    code, out, err = show(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# -------------------------------------------------------------------------------------------------
# Resolving SESSION
# -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ref", ["aaaa1111-nix", "aaaa", "Simplify the nix flake", "simplify THE nix flake",
                                 "nix simplify", "Simplify the nix flak"])
def test_session_is_found_by_id_prefix_exact_name_and_fuzzy_name(sessions, capsys, ref):
    code, out, err = show(capsys, *ref.split(" "))
    assert code == 0, err
    assert out.startswith("session:  aaaa1111-nix\n")


def test_session_is_found_by_its_file_path(sessions, capsys):
    assert show_json(capsys, sessions["billing"])["session"]["sessionId"] == "cccc2222-billing"
    assert show_json(capsys, os.path.relpath(sessions["billing"]))["session"]["sessionId"] == "cccc2222-billing"


def test_typo_in_name_finds_the_close_match(sessions, capsys):
    assert show_json(capsys, "Invoice PDF exprot")["session"]["sessionId"] == "cccc2222-billing"


def test_unique_prefix_wins_and_shared_prefix_lists_the_candidates(sessions, capsys):
    assert show_json(capsys, "cccc1")["session"]["sessionId"] == "cccc1111-carousel"
    code, out, err = show(capsys, "cccc")
    assert code == 1 and out == ""
    assert '"cccc" matches 2 sessions' in err
    for needle in ("cccc1111-carousel", "Landing page carousel", "/home/dev/site", "2026-02-01 10:00 UTC",
                   "cccc2222-billing", "Invoice PDF export", "/home/dev/billing"):
        assert needle in err
    code, out, err = show(capsys, "cccc", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "ambiguous"


def test_every_id_search_prints_opens_that_result_when_two_files_share_a_session_id(env, tmp_path, capsys):
    # Gemini CLI writes a side question as a second session-<time>-<id>.jsonl with the same sessionId:
    # two sessions, one id. The short id search prints for each opens that one; the id alone is ambiguous.
    chats = tmp_path / "home" / ".gemini" / "tmp" / "proj" / "chats"
    write_config({"sources": [{"parser": "gemini", "path": str(chats.parent.parent)}]}, tmp_path)
    meta = {"sessionId": "5b6234f8-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "projectHash": "ab", "startTime": "2026-04-29T21:39:22Z"}
    for minute, words in (("21-39", "migrate the walrus schema"), ("21-52", "why does the narwhal cache expire")):
        write_jsonl(chats / ("session-2026-04-29T%s-5b6234f8.jsonl" % minute), [
            meta, {"id": "u1", "timestamp": "2026-04-29T%s:30Z" % minute.replace("-", ":"), "type": "user",
                   "content": words}])
    printed = set()
    for word, text in (("walrus", "migrate the walrus schema"), ("narwhal", "why does the narwhal cache expire")):
        [hit] = search_json(capsys, word)["results"]
        code, out, _ = run(capsys, "search", word)
        assert code == 0 and hit["shortId"] in out
        printed.add(hit["shortId"])
        shown = show_json(capsys, hit["shortId"])
        assert [c["text"] for c in shown["chunks"]] == [text] and shown["session"]["shortId"] == hit["shortId"]
    assert printed == {"5b6234f8~1", "5b6234f8~2"}
    for ref in ("5b6234f8", meta["sessionId"]):
        code, out, err = show(capsys, ref)
        assert code == 1 and out == "" and "matches 2 sessions" in err
        assert "5b6234f8~1" in err and "5b6234f8~2" in err and "21-52-5b6234f8.jsonl" in err
    assert show(capsys, "5b6234f8~3")[0] == 1
    code, out, _ = run(capsys, "forget", "5b6234f8", "--json")   # forget takes every copy, as before
    assert code == 0 and len(json.loads(out)["forgotten"]["files"]) == 2


def test_unknown_session_is_not_found_exit_1(sessions, capsys):
    code, out, err = show(capsys, "no-such-session-anywhere", "--json")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "not_found"
    assert "no session matches" in err


# -------------------------------------------------------------------------------------------------
# What show prints
# -------------------------------------------------------------------------------------------------

def test_human_output_has_header_then_who_said_what_when(sessions, capsys):
    code, out, err = show(capsys, "aaaa")
    head, body = out.split("\n\n", 1)
    for needle in ("agent:    pi", "name:     Simplify the nix flake", "cwd:      /home/dev/infra",
                   "created:  2026-01-05 10:00 UTC", "path:     " + sessions["nix"],
                   "resume:   pi --session " + sessions["nix"], "chunks:   6"):
        assert needle in head
    assert body.startswith("[0] 2026-01-05 10:00 user:\nThe flake.nix has grown into a mess of overlays.\n\n")
    # Tool calls and thinking are one line each; summaries are marked as such.
    assert "[1] 2026-01-05 10:00 thinking: Overlays first, then the dev shell.\n" in body
    assert "[3] 2026-01-05 10:00 tool bash: nix flake check (error)\n" in body
    assert "[4] 2026-01-05 10:00 summary (compaction):\nWe removed three overlays" in body
    assert "--show-trace" not in body and "attribute 'overlay'" not in body


def test_tools_expands_tool_calls_and_all_expands_thinking_too(sessions, capsys):
    out = show(capsys, "aaaa", "--tools")[1]
    assert "[3] 2026-01-05 10:00 tool bash:\ncommand: nix flake check\n--show-trace\nerror:\nattribute 'overlay'" in out
    assert "thinking: Overlays first" in out  # still one line
    data = show_json(capsys, "aaaa", "--all")
    assert not any(c["collapsed"] for c in data["chunks"])
    assert data["chunks"][3]["text"].startswith("tool: bash\ncommand: nix flake check")


def test_json_has_header_chunks_and_what_was_omitted(sessions, capsys):
    data = show_json(capsys, "aaaa")
    assert data["session"] == {
        "sessionId": "aaaa1111-nix", "shortId": "aaaa1111", "agent": "pi", "host": None, "name": "Simplify the nix flake",
        "title": "Simplify the nix flake", "cwd": "/home/dev/infra",
        "created": "2026-01-05T10:00:00.000Z", "modified": data["session"]["modified"], "path": sessions["nix"],
        "parent": None, "resumeCommand": "pi --session " + sessions["nix"], "fileDeleted": False, "summary": None,
        "chunkCount": 6}
    assert [(c["seq"], c["kind"]) for c in data["chunks"]] == [
        (0, "user"), (1, "thinking"), (2, "assistant"), (3, "tool"), (4, "summary"), (5, "user")]
    assert data["chunks"][3] == {"seq": 3, "kind": "tool", "role": "assistant", "tool": "bash",
                                 "timestamp": "2026-01-05T10:00:03.000Z", "text": "nix flake check (error)",
                                 "collapsed": True}
    assert data["truncated"] is False
    assert data["omitted"] == {"before": 0, "after": 0, "cutSeq": None}


def test_show_takes_the_resume_command_a_result_gave(env, tmp_path, capsys):
    # The resume command is what a user copies from a result; pasted whole into `show`, it named no
    # session ("no session matches").
    PiWriter(env, "pi-lynx").user("the lynx camera trap batteries").save()
    sid = "11111111-2222-4333-8444-555555555555"
    claude = tmp_path / "claude-projects"
    write_jsonl(claude / "-home-woods" / (sid + ".jsonl"), [dict(cc_cl_user(
        "u1", "2026-05-01T10:00:00.000Z", "the lynx tracks in the snow"), sessionId=sid, cwd="/home/woods")])
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "claude", "path": str(claude)}]}, tmp_path)
    results = search_json(capsys, "lynx")["results"]
    assert len(results) == 2 and all(r["resumeCommand"] for r in results)
    for r in results:   # `pi --session <file>`, `cd '/home/woods' && claude --resume <id>`
        code, out, err = run(capsys, "show", r["resumeCommand"], "--json", "--max-chars", "0")
        assert code == 0, err
        assert json.loads(out)["session"]["sessionId"] == r["sessionId"]
    code, _, err = run(capsys, "show", "claude --resume 99999999-2222-4333-8444-555555555555")
    assert code == 1 and "no session matches" in err


def test_around_shows_k_chunks_each_side_and_says_what_is_left(sessions, capsys):
    data = show_json(capsys, "dddd", "--around", "20", "--context", "2")
    assert [c["seq"] for c in data["chunks"]] == [18, 19, 20, 21, 22]
    assert data["omitted"] == {"before": 18, "after": 17, "cutSeq": None} and data["around"] == 20
    out = show(capsys, "dddd", "--around", "20")[1]  # default context 3
    assert "… 17 chunks (seq 0-16) not shown\n" in out
    assert "[17] " in out and "[23] " in out and "[16] " not in out and "[24] " not in out
    assert "… 16 chunks (seq 24-39) not shown (use --around SEQ)\n" in out
    assert [c["seq"] for c in show_json(capsys, "dddd", "--around", "0", "--context", "1")["chunks"]] == [0, 1]
    code, out, err = show(capsys, "dddd", "--around", "40")
    assert code == 2 and "outside the session's chunks (0-39)" in err


@pytest.mark.parametrize("limit", [300, 700, 1000, 1500, 4000])
def test_max_chars_bounds_text_and_json_and_says_what_was_cut(sessions, capsys, limit):
    code, out, err = show(capsys, "dddd", "--max-chars", str(limit))
    assert code == 0 and len(out) <= limit
    if limit >= 1000:
        assert "[0] " in out and "not shown (use --around SEQ or a larger --max-chars)\n" in out
    code, out, err = show(capsys, "dddd", "--max-chars", str(limit + 1000), "--json")
    assert code == 0 and len(out) <= limit + 1000
    data = json.loads(out)
    assert data["truncated"] is True
    assert data["omitted"]["before"] == 0 and data["omitted"]["after"] == 40 - len(data["chunks"])


def test_max_chars_with_around_keeps_the_asked_for_chunk(sessions, capsys):
    data = show_json(capsys, "dddd", "--around", "20", "--context", "10", "--max-chars", "2500")
    seqs = [c["seq"] for c in data["chunks"]]
    assert 20 in seqs and seqs == list(range(seqs[0], seqs[-1] + 1))
    assert data["omitted"]["before"] == seqs[0] and data["omitted"]["after"] == 39 - seqs[-1]
    # A chunk bigger than the whole budget is cut rather than dropped.
    data = show_json(capsys, "dddd", "--around", "5", "--max-chars", "850")
    assert [c["seq"] for c in data["chunks"]] == [5] and data["omitted"]["cutSeq"] == 5
    assert data["chunks"][0]["text"].endswith("[…cut]")


def test_json_is_bounded_by_default_and_human_output_is_not(env, capsys):
    w = PiWriter(env, "eeee-huge")
    for i in range(30):
        w.user("message %d %s" % (i, "word " * 400))
    w.save()
    code, out, err = show(capsys, "eeee", "--json")
    assert len(out) <= sesame.SHOW_JSON_MAX_CHARS and json.loads(out)["truncated"] is True
    assert len(json.loads(show(capsys, "eeee", "--json", "--max-chars", "0")[1])["chunks"]) == 30
    out = show(capsys, "eeee")[1]
    assert len(out) > 60000 and "not shown" not in out


# ---------------------------------------------------------------------------------------------
# Application: one request per command, the front ends only format; the command table
# ---------------------------------------------------------------------------------------------

def test_the_cli_and_mcp_make_the_same_search_request_and_get_the_same_data(corpus, capsys):
    argv = ["search", "carousel", "--limit", "3", "--tool", "bash", "--fields", "full", "--no-refresh"]
    cli = sesame.cli_params(sesame.build_parser("search").parse_args(argv))
    cli.pop("json")
    mcp = sesame.request_params(sesame.COMMANDS["search"], {"query": "carousel", "limit": 3, "tool": "bash",
                                                              "fields": "full", "no_refresh": True})
    mcp.pop("json")
    assert cli == mcp
    for args in ({"query": "carousel"}, {"query": "upload bucket", "max_chars": 0, "fields": "minimal"}):
        params = sesame.request_params(sesame.COMMANDS["search"], args)
        asked = json.loads(json.dumps(params))
        via_cli = sesame.search_request(sesame.Context(), sesame.cli_params(sesame.quick_args(
            ["search", args["query"]] + (["--max-chars", "0", "--fields", "minimal"] if len(args) > 1 else []))))
        via_mcp = sesame.search_request(sesame.Context(), params)
        assert via_cli == via_mcp and via_cli["results"] and params == asked  # the request changed nothing given
        assert mcp_call("search", args)["structuredContent"] == sesame.search_json(via_mcp)


def test_search_data_gives_matches_as_offsets_and_stars_of_the_session_stay_text(env, capsys):
    # Markdown bold in a session is "**" too: in the data it is text, and the match is an offset.
    w = PiWriter(env, "stars-1")
    w.user("Make the **quokka** banner bold").assistant("Done: **bold** quokka banner.").save()
    run(capsys, "index")
    data = sesame.search_request(sesame.Context(), sesame.request_params(sesame.COMMANDS["search"], {"query": "quokka"}))
    r = data["results"][0]
    assert "**quokka**" in r["matchedSnippet"] and r["matchedHighlights"]
    assert {r["matchedSnippet"][a:b] for a, b in r["matchedHighlights"]} == {"quokka"}
    for m in r["matches"]:
        assert {m["snippet"][a:b] for a, b in m["highlights"]} == {"quokka"}
    printed = json.loads(run(capsys, "search", "quokka", "--json")[1])["results"][0]
    assert printed["matchedSnippet"] == sesame.search_json(data)["results"][0]["matchedSnippet"]
    assert "****quokka****" in printed["matchedSnippet"] and "highlights" not in printed["matches"][0]


def test_a_search_request_reads_the_current_session_from_its_context_env(env, capsys, tmp_path, monkeypatch):
    projects = tmp_path / "claude-projects"
    write_config({"sources": [{"parser": "claude", "path": str(projects)}]}, tmp_path)
    own = "0c0c0c0c-0000-4000-8000-000000000009"
    write_jsonl(projects / "-home-u-proj" / (own + ".jsonl"),
                [dict(cc_cl_user("u1", "2026-02-01T10:00:00.000Z", "the wombat lattice"), sessionId=own)])
    monkeypatch.delenv("CLAUDE_CODE_SESSION_ID", raising=False)
    ctx = sesame.Context(dict(os.environ, CLAUDE_CODE_SESSION_ID=own))
    data = sesame.search_request(ctx, sesame.request_params(sesame.COMMANDS["search"], {"query": "wombat"}))
    assert [(r["sessionId"], r["current"]) for r in data["results"]] == [(own, True)]


def test_a_command_added_to_the_table_is_in_the_usage_argparse_and_the_mcp_tools(env, capsys, monkeypatch):
    def options(p):
        p.add_argument("word", nargs="+", help="what to echo")
        p.add_argument("--times", type=int, default=1, help="how often")
        p.add_argument("--json", action="store_true", help="print JSON")

    def request(ctx, params):
        return {"echo": [" ".join(params["word"])] * params["times"]}

    def cli(args, ctx):
        data = request(ctx, sesame.cli_params(args))
        sys.stdout.write(sesame.to_json(data) + "\n" if args.json else "\n".join(data["echo"]) + "\n")
        return 0

    echo = sesame.Command("echo", "WORD...", "say the words again", options, request, cli, tool="Echo the words.",
                          mcp=lambda ctx, params: ("echoed", request(ctx, params)))
    monkeypatch.setitem(sesame.COMMANDS, "echo", echo)
    assert "sesame echo WORD..." in run(capsys, )[1]
    assert "say the words again" in run(capsys, "--help")[1] and "--times" in run(capsys, "echo", "--help")[1]
    assert run(capsys, "echo", "hi", "there", "--times", "2") == (0, "hi there\nhi there\n", "")
    assert json.loads(run(capsys, "echo", "hi", "--json")[1]) == {"echo": ["hi"]}
    assert "did you mean --times?" in run(capsys, "echo", "hi", "--tims", "2")[2]
    tools = {t["name"]: t for t in sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]}
    assert tools["echo"]["inputSchema"]["required"] == ["word"] and tools["echo"]["inputSchema"]["properties"]["times"]["type"] == "integer"
    assert mcp_call("echo", {"word": "hi", "times": 3})["structuredContent"] == {"echo": ["hi"] * 3}
    assert mcp_call("echo", {"word": "hi", "times": "3"})["structuredContent"] == {"echo": ["hi"] * 3}   # as meant
    assert mcp_call("echo", {"word": "hi", "times": "thrice"})["isError"] is True


# ---------------------------------------------------------------------------------------------
# Other machines: remotes over ssh, against a real sshd on 127.0.0.1
# ---------------------------------------------------------------------------------------------

SSHD = "/usr/sbin/sshd"
REMOTE_SID = "4e5e0000-0000-4000-8000-00000000abcd"


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd(tmp_path, env, monkeypatch):
    """A real sshd on 127.0.0.1 (run as this test's own process) whose logins get a temporary HOME,
    the "remote", with a stub `claude` on its PATH; `ssh` on the local PATH is a wrapper naming the
    test's ssh config (key, known host). Returns a dict: host, remote home, stub log, bin dir."""
    missing = [p for p in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("rsync")) if not p or not os.path.exists(p)]
    if missing or not os.path.exists(SSHD):
        pytest.skip("needs openssh-server (%s) and rsync (apt-get install -y openssh-server rsync)" % SSHD)
    d = tmp_path / "ssh"
    d.mkdir()
    remote_home, stub = tmp_path / "remote-home", tmp_path / "remote-bin"
    remote_home.mkdir()
    stub.mkdir()
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(str(d / "client_key.pub"), str(d / "authorized_keys"))
    # The stub agent prints where it runs and what it was given (the resume command's test).
    write_file(stub / "claude", '#!/bin/sh\necho "stub-claude cwd=$(pwd) args=$*"\n')
    os.chmod(str(stub / "claude"), 0o755)
    port = _free_port()
    write_file(d / "sshd_config", "\n".join([
        "ListenAddress 127.0.0.1", "HostKey %s" % (d / "host_key"), "AuthorizedKeysFile %s" % (d / "authorized_keys"),
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "UsePAM no",
        "PermitRootLogin yes", "StrictModes no", "PidFile none",
        "SetEnv HOME=%s PATH=%s:/usr/bin:/bin" % (remote_home, stub), ""]))
    known = "sesame-test " + " ".join((d / "host_key.pub").read_text().split()[:2])
    write_file(d / "known_hosts", known + "\n")
    import getpass
    write_file(d / "ssh_config", "\n".join([  # (ssh takes the first value it reads for each option)
        "Host sesame-down", "  Port %d" % _free_port(),
        "Host sesame-test sesame-down", "  HostName 127.0.0.1", "  Port %d" % port, "  User %s" % getpass.getuser(),
        "  IdentityFile %s" % (d / "client_key"), "  IdentitiesOnly yes", "  UserKnownHostsFile %s" % (d / "known_hosts"),
        "  HostKeyAlias sesame-test", "  StrictHostKeyChecking yes", "  LogLevel ERROR", ""]))
    bindir = tmp_path / "local-bin"
    bindir.mkdir()
    write_file(bindir / "ssh", '#!/bin/sh\nexec %s -F %s "$@"\n' % (shutil.which("ssh"), d / "ssh_config"))
    os.chmod(str(bindir / "ssh"), 0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "/usr/bin:/bin")))
    try:  # sshd refuses to start without its privilege separation folder (the package makes it at boot)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError:
        pass
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config"), "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=open(str(d / "sshd.log"), "w"))
    try:
        for _ in range(100):
            if subprocess.run(["ssh", "-o", "BatchMode=yes", "sesame-test", "true"], capture_output=True).returncode == 0:
                break
            if proc.poll() is not None:
                pytest.skip("sshd did not start: %s" % (d / "sshd.log").read_text()[-300:])
            time.sleep(0.1)
        else:
            pytest.skip("sshd did not answer: %s" % (d / "sshd.log").read_text()[-300:])
        yield {"host": "sesame-test", "home": remote_home, "bin": bindir}
    finally:
        proc.terminate()
        proc.wait(10)


def remote_claude(home, sid, words, cwd="/srv/deploy app"):
    """A Claude Code session on the remote, in its ~/.claude/projects."""
    recs = [{"type": "user", "uuid": sid + "-u%d" % i, "sessionId": sid, "cwd": cwd, "isSidechain": False,
             "timestamp": "2026-02-01T10:00:%02dZ" % i, "message": {"role": "user", "content": w}}
            for i, w in enumerate(words)]
    return write_jsonl(home / ".claude" / "projects" / ("-" + cwd.strip("/").replace("/", "-").replace(" ", "-")) /
                       (sid + ".jsonl"), recs)


def test_remote_session_found_after_sync_with_host_and_a_resume_command_that_works(sshd, capsys, tmp_path):
    cwd = sshd["home"] / "deploy app"   # a folder on the "remote" (this machine), with a space
    cwd.mkdir()
    remote_claude(sshd["home"], REMOTE_SID, ["the deploy pipeline broke on the flamingo step"], cwd=str(cwd))
    assert run(capsys, "remote", "add", "devbox", "--host", sshd["host"])[0] == 0
    code, out, err = run(capsys, "sync")
    assert code == 0, err
    assert "devbox: synced from sesame-test with rsync" in out
    mirror = tmp_path / "data" / "remotes" / "devbox"
    assert stat.S_IMODE(os.stat(str(mirror)).st_mode) == 0o700
    code, out, err = run(capsys, "search", "flamingo", "--json")
    r = json.loads(out)["results"][0]
    assert (r["sessionId"], r["host"], r["cwd"]) == (REMOTE_SID, "devbox", str(cwd))
    assert r["path"].startswith(str(mirror) + os.sep)
    assert "[devbox]" in run(capsys, "search", "flamingo")[1]
    assert run(capsys, "show", REMOTE_SID[:8])[1].count("host:") == 1
    # The resume command, pasted into a shell: the stub agent on the remote says where it ran.
    done = subprocess.run(r["resumeCommand"].replace("ssh -t ", "ssh -tt ", 1), shell=True, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "stub-claude cwd=%s args=--resume %s" % (cwd, REMOTE_SID) in done.stdout, (r["resumeCommand"], done)
    # --host filters: the remote's name, or this machine.
    assert search_ids(capsys, "flamingo", "--host", "devbox") == [REMOTE_SID]
    assert search_ids(capsys, "flamingo", "--host", "local") == []
    assert run(capsys, "search", "flamingo", "--host", "nosuch")[0] == 2


def test_remote_append_moves_only_the_new_bytes_and_is_found(sshd, capsys):
    words = ["first message about the pelican migration " + "x" * 200000]
    path = remote_claude(sshd["home"], REMOTE_SID, words, cwd="/srv/app")
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    code, out, err = run(capsys, "sync", "devbox", "--json")
    first = json.loads(out)["remotes"][0]
    assert code == 0 and first["bytesCopied"] >= 200000, err
    rec = {"type": "user", "uuid": "later", "sessionId": REMOTE_SID, "cwd": "/srv/app", "isSidechain": False,
           "timestamp": "2026-02-01T11:00:00Z", "message": {"role": "user", "content": "now the cormorant rollout"}}
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    code, out, err = run(capsys, "sync", "devbox", "--json")
    again = json.loads(out)["remotes"][0]
    assert code == 0 and again["bytesCopied"] < 2000, again
    assert search_ids(capsys, "cormorant") == [REMOTE_SID]


def test_without_rsync_changed_files_come_over_ssh_tar_said_once(sshd, capsys, monkeypatch):
    old = remote_claude(sshd["home"], "01d00000-0000-4000-8000-000000000001", ["the old puffin session " + "y" * 50000])
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    path = remote_claude(sshd["home"], REMOTE_SID, ["the osprey session"], cwd="/srv/app")
    monkeypatch.setenv("PATH", str(sshd["bin"]))   # ssh only: no rsync here
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    code, out, err = run(capsys, "sync", "--json")
    assert code == 0 and json.loads(out)["remotes"][0]["method"] == "tar", err
    assert err.count("rsync is missing here") == 1
    assert search_ids(capsys, "osprey") == [REMOTE_SID] and len(search_ids(capsys, "puffin")) == 1
    with open(path, "a") as f:
        f.write(json.dumps({"type": "user", "uuid": "later", "sessionId": REMOTE_SID, "cwd": "/srv/app", "isSidechain": False,
                            "timestamp": "2026-02-01T11:00:00Z", "message": {"role": "user", "content": "then the gannet"}}) + "\n")
    code, out, err = run(capsys, "sync", "--json")
    assert code == 0 and json.loads(out)["remotes"][0]["bytesCopied"] == os.path.getsize(path)   # the old file stays
    assert search_ids(capsys, "gannet") == [REMOTE_SID]


@pytest.mark.parametrize("method", ["rsync", "tar"])
def test_remote_projects_folders_bring_the_per_project_histories_and_nothing_else(sshd, capsys, tmp_path, monkeypatch,
                                                                                   method):
    # Aider, SpecStory and Crush keep their histories inside each project: `--projects ~/code` copies
    # those files (found as a local walk finds them: not in node_modules, not in hidden folders), no
    # other file of the projects.
    code_dir = sshd["home"] / "code"
    write_file(code_dir / "app" / ".aider.chat.history.md", "# aider chat started at 2026-02-01 10:00:00\n\n"
               "#### the albatross migration needs a rollback plan  \n\nAdded a rollback step.\n")
    write_file(code_dir / "web" / ".specstory" / "history" / "2026-02-01_10-00-00Z-kestrel.md",
               "<!-- Generated by SpecStory -->\n\n# Kestrel (2026-02-01 10:00:00Z)\n\n"
               "_**User**_\n\nthe kestrel cache question\n\n---\n\n_**Assistant**_\n\nan answer\n\n---\n")
    decoys = [code_dir / "app" / "node_modules" / "pkg" / ".aider.chat.history.md",
              code_dir / ".hidden" / ".aider.chat.history.md", code_dir / "web" / "notes" / "history" / "x.md"]
    for d in decoys:
        write_file(d, "# aider chat started at 2026-02-01 10:00:00\n\n#### the albatross decoy  \n")
    write_file(code_dir / "app" / "src" / "main.py", "print('the albatross')\n" * 1000)
    if method == "tar":
        monkeypatch.setenv("PATH", str(sshd["bin"]))   # ssh only: no rsync here
    assert run(capsys, "remote", "add", "devbox", "--host", sshd["host"], "--projects", "~/code")[0] == 0
    assert "projects in ~/code" in run(capsys, "remote", "list")[1]
    code, out, err = run(capsys, "sync", "--json")
    assert code == 0 and json.loads(out)["remotes"][0]["method"] == method, err
    mirror = tmp_path / "data" / "remotes" / "devbox" / "files"
    copied = sorted(os.path.relpath(os.path.join(d, f), str(mirror) + str(code_dir))
                    for d, _, fs in os.walk(str(mirror) + str(code_dir)) for f in fs)
    assert copied == ["app/.aider.chat.history.md", "web/.specstory/history/2026-02-01_10-00-00Z-kestrel.md"]
    [hit] = search_json(capsys, "albatross")["results"]
    assert (hit["agent"], hit["host"]) == ("aider", "devbox")
    [hit] = search_json(capsys, "kestrel")["results"]
    assert (hit["agent"], hit["host"]) == ("specstory", "devbox")


def test_remote_projects_folders_that_mean_nothing_on_a_remote_are_refused(env, capsys):
    for bad in ("code", "~/../etc", "/srv/a\nb", "-rf"):
        code, _, err = run(capsys, "remote", "add", "devbox", "--projects=" + bad)
        assert code == 2 and "invalid projects folder" in err, (bad, err)
    assert run(capsys, "remote", "list")[1].startswith("no remotes")


def test_unreachable_remote_fails_sync_in_one_line_shows_in_status_and_keeps_its_sessions(sshd, capsys, tmp_path):
    remote_claude(sshd["home"], REMOTE_SID, ["the heron outage"])
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    assert run(capsys, "sync")[0] == 0
    # The same remote now points at a port nobody listens on.
    data = json.loads((tmp_path / "config" / "remotes.json").read_text())
    data["remotes"]["devbox"]["host"] = "sesame-down"
    (tmp_path / "config" / "remotes.json").write_text(json.dumps(data))
    code, out, err = run(capsys, "sync")
    lines = [l for l in err.splitlines() if l.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("sesame: sync devbox: cannot reach sesame-down"), err
    status = json.loads(run(capsys, "status", "--json")[1])["remotes"][0]
    assert status["error"].startswith("cannot reach") and status["lastSync"] and status["lastAttempt"] >= status["lastSync"]
    assert "remote:   devbox (sesame-down): last sync" in run(capsys, "status")[1]
    assert search_ids(capsys, "heron") == [REMOTE_SID]


def test_remote_symlink_out_of_the_mirror_is_not_followed(sshd, capsys, tmp_path):
    remote_claude(sshd["home"], REMOTE_SID, ["the ibis session"])
    secret = write_jsonl(tmp_path / "outside" / "x.jsonl", [
        {"type": "user", "uuid": "s1", "sessionId": "5ec2e700-0000-4000-8000-000000000001", "cwd": "/etc",
         "isSidechain": False, "timestamp": "2026-02-01T10:00:00Z", "message": {"role": "user", "content": "albatross secret"}}])
    folder = sshd["home"] / ".claude" / "projects" / "-leak"
    folder.mkdir()
    os.symlink(secret, str(folder / "5ec2e700-0000-4000-8000-000000000001.jsonl"))
    os.symlink(str(tmp_path / "outside"), str(sshd["home"] / ".claude" / "projects" / "-leakdir"))
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    assert run(capsys, "sync")[0] == 0
    mirror = tmp_path / "data" / "remotes" / "devbox" / "files"
    assert not any(os.path.islink(os.path.join(d, n)) for d, ds, fs in os.walk(str(mirror)) for n in ds + fs)
    assert search_ids(capsys, "albatross") == [] and search_ids(capsys, "ibis") == [REMOTE_SID]


def test_a_deleted_local_session_is_kept_when_a_remote_has_the_same_id(sshd, capsys, env):
    local = remote_claude(pathlib.Path(os.environ["HOME"]), REMOTE_SID, ["the plover work here"], cwd="/home/u/here")
    write_config({"sources": [{"parser": "pi", "path": str(env)},
                              {"parser": "claude", "path": os.path.dirname(os.path.dirname(local))}]}, env.parent)
    assert search_ids(capsys, "plover") == [REMOTE_SID]
    os.remove(local)   # the agent deleted it here: Sesame keeps it
    assert run(capsys, "index")[0] == 0
    remote_claude(sshd["home"], REMOTE_SID, ["the plover work on the box"], cwd="/srv/box")
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    assert run(capsys, "sync")[0] == 0
    results = json.loads(run(capsys, "search", "plover", "--json")[1])["results"]
    assert sorted((r["host"] or "", r["fileDeleted"]) for r in results) == [("", True), ("devbox", False)]


def test_watch_and_mcp_sync_remotes_in_the_background_every_remote_sync_seconds(sshd, capsys, env):
    remote_claude(sshd["home"], REMOTE_SID, ["the skua sighting"])
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    syncer = sesame.RemoteSyncer()   # what watch and the MCP server's refresh thread poke each round
    assert syncer.poke(sesame.Context())   # never synced: due
    syncer.thread.join(120)
    assert search_ids(capsys, "skua") == [REMOTE_SID]
    assert not syncer.poke(sesame.Context())   # synced a moment ago: not due for remoteSyncSeconds
    state_path = os.path.join(sesame.remote_dir(dict(os.environ), "devbox"), "sync.json")
    for attempt in (sesame.iso(sesame.now_utc() + datetime.timedelta(hours=1)), "not a time"):
        with open(state_path) as f:
            state = json.load(f)
        with open(state_path, "w") as f:
            json.dump(dict(state, lastAttempt=attempt), f)   # tried "in an hour" (a clock set back since), or unreadable
        assert syncer.poke(sesame.Context())   # due: not put off until then, or for ever
        syncer.thread.join(120)
    write_config({"sources": [{"parser": "pi", "path": str(env)}], "remoteSyncSeconds": 0.001}, env.parent)
    assert syncer.poke(sesame.Context())
    syncer.thread.join(120)
    assert "host" in sesame.option_schema(sesame.COMMANDS["search"])["properties"]   # the MCP search tool filters by host too


def test_a_remote_session_folder_that_is_a_symlink_is_copied_as_its_target(sshd, capsys, tmp_path):
    dotfiles = tmp_path / "dotfiles"   # ~/.claude/projects -> a folder elsewhere on the remote (dotfiles)
    remote_claude(dotfiles, REMOTE_SID, ["the shearwater session"])
    os.makedirs(str(sshd["home"] / ".claude"))
    os.symlink(str(dotfiles / ".claude" / "projects"), str(sshd["home"] / ".claude" / "projects"))
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    assert run(capsys, "sync")[0] == 0
    assert search_ids(capsys, "shearwater") == [REMOTE_SID]


def test_cline_and_roo_code_tasks_in_the_remotes_editor_storage_are_synced_and_found_with_their_host(sshd, capsys, tmp_path,
                                                                                                       monkeypatch):
    # These folders count only where they exist: the remote is asked (the copy here is still empty).
    # (Cline's own folder in VS Code is also the place named when none exists; Roo Code's in Cursor is not.)
    storage = sshd["home"] / ".config"
    places = {"1735000000000": storage / "Code" / "User" / "globalStorage" / "saoudrizwan.claude-dev" / "tasks",
              "1735000000001": storage / "Cursor" / "User" / "globalStorage" / "rooveterinaryinc.roo-cline" / "tasks"}
    for task, tasks in places.items():
        history = [{"role": "user", "content": [{"type": "text", "text": "<task>\nwhy does the wombat importer stall\n</task>"}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "The importer waits on a lock."}]}]
        write_file(tasks / task / "api_conversation_history.json", json.dumps(history))
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    commands = []
    real_run = sesame._run
    monkeypatch.setattr(sesame, "_run", lambda cmd, *a, **k: commands.append(cmd[0]) or real_run(cmd, *a, **k))
    code, out, err = run(capsys, "sync", "--json")
    assert code == 0, err
    assert set(map(str, places.values())) <= set(json.loads(out)["remotes"][0]["roots"])
    # ssh: the environment, which folders exist, which extension folders exist inside the storages
    assert commands == ["ssh", "ssh", "ssh", "rsync"]
    r = search_json(capsys, "wombat")["results"]
    assert sorted((x["agent"], x["sessionId"], x["host"]) for x in r) == [
        ("cline", "1735000000000", "devbox"), ("cline", "1735000000001", "devbox")]
    assert all(x["path"].startswith(str(tmp_path / "data" / "remotes" / "devbox" / "files") + os.sep) for x in r)


def _fake_remote(folders):
    """ask() for remote_roots answered from a set of the remote's folders, plus answers to nothing
    asked (a hostile remote's), which must be ignored."""
    calls = []

    def ask(questions):
        calls.append(questions)
        said = [p for kind, p in questions if kind == "isdir" and p in folders]
        said += [f for kind, p in questions if kind == "subdirs" for f in folders if os.path.dirname(f) == p]
        return said + ["/etc", "/Users/me/.omp/profiles/.."]
    return ask, calls


def test_a_macos_remote_is_read_in_its_own_layout_library_application_support():
    lib = "/Users/me/Library/Application Support"
    ask, calls = _fake_remote({lib + "/Code/User/globalStorage", lib + "/Code/User/globalStorage/saoudrizwan.claude-dev/tasks",
                               lib + "/Zed/threads", "/Users/me/.omp/profiles/work", "/etc"})
    agents = [PARSERS[a] for a in ("cline", "cursor", "zed", "omp", "claude")]
    roots = sesame.remote_roots("/mirror", {"HOME": "/Users/me"}, sesame.remote_platform("Darwin"), agents, ask)
    assert ("cline", lib + "/Code/User/globalStorage/saoudrizwan.claude-dev/tasks") in roots
    assert ("cursor", lib + "/Cursor/User/globalStorage") in roots   # named by the OS, present or not
    assert ("zed", lib + "/Zed/threads") in roots
    assert ("omp", "/Users/me/.omp/profiles/work/agent/sessions") in roots
    assert not any(r.startswith("/etc") or ".." in r for _, r in roots)
    assert len(calls) == 2   # the storage, then the extension folders inside it
    ask, calls = _fake_remote(set())
    roots = sesame.remote_roots("/mirror", {"HOME": "/home/me"}, sesame.remote_platform("Linux"), agents, ask)
    assert ("cursor", "/home/me/.config/Cursor/User/globalStorage") in roots
    assert ("cline", "/home/me/.config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks") in roots   # (named when absent)


def test_every_agents_default_places_for_a_remote_are_asked_of_the_remote_not_looked_up_here(monkeypatch):
    # A folder check in default_roots that bypasses root_isdir would look at this machine (at the
    # empty copy, for a remote) and that agent would never be synced.
    def here(*args, **kwargs):
        raise AssertionError("default_roots looked at this machine's disk: %r" % (args,))
    ask, calls = _fake_remote(set())
    with monkeypatch.context() as m:
        for name in ("isdir", "exists", "isfile"):
            m.setattr(os.path, name, here)
        m.setattr(os, "scandir", here)
        m.setattr(os, "listdir", here)
        roots = sesame.remote_roots("/mirror", {"HOME": "/home/me"}, "linux", list(PARSERS.values()), ask)
    assert roots and all(r.startswith("/home/me/") for _, r in roots)


def test_hostile_remote_names_and_hosts_are_refused(env, capsys, tmp_path):
    for argv in (["-oProxyCommand=touch"], ["dev;rm"], ["dev box"], ["$(id)"], ["local"],
                 ["dev", "--host=-oProxyCommand=touch /tmp/x"], ["dev", "--host", "a b"], ["dev", "--host", "h`id`"],
                 ["dev", "--host", "host:path"]):
        code, out, err = run(capsys, "remote", "add", *argv)
        assert code == 2 and err.startswith("sesame: ") and len(err.splitlines()) == 1, (argv, err)
    assert not (tmp_path / "config" / "remotes.json").exists()
    (tmp_path / "config" / "remotes.json").write_text('{"remotes": {"x": {"host": "-oProxyCommand=evil"}}}')
    code, out, err = run(capsys, "sync")
    assert code == 1 and "invalid ssh host" in err


def test_remote_add_list_remove(env, capsys, tmp_path):
    cfg = (tmp_path / "config" / "config.jsonc").read_text()
    code, out, err = run(capsys, "remote", "add", "devbox", "--host", "me@devbox.lan", "--agents", "claude,codex")
    assert code == 0, err
    rows = json.loads(run(capsys, "remote", "list", "--json")[1])["remotes"]
    assert [(r["name"], r["host"], r["agents"], r["lastSync"]) for r in rows] == [("devbox", "me@devbox.lan", ["claude", "codex"], None)]
    assert (tmp_path / "config" / "config.jsonc").read_text() == cfg   # the user's own file is never rewritten
    assert run(capsys, "remote", "add", "x", "--agents", "nosuch")[0] == 2
    assert run(capsys, "remote", "remove", "devbox")[0] == 0
    assert json.loads(run(capsys, "remote", "list", "--json")[1])["remotes"] == []
    assert run(capsys, "remote", "remove", "devbox")[0] == 2


def test_same_session_id_on_two_machines_both_searchable_and_showable(sshd, capsys, env):
    remote_claude(sshd["home"], REMOTE_SID, ["the kestrel work on the box"], cwd="/srv/box")
    local = remote_claude(pathlib.Path(os.environ["HOME"]), REMOTE_SID, ["the kestrel work here"], cwd="/home/u/here")
    write_config({"sources": [{"parser": "pi", "path": str(env)},
                              {"parser": "claude", "path": os.path.dirname(os.path.dirname(local))}]}, env.parent)
    run(capsys, "remote", "add", "devbox", "--host", sshd["host"])
    assert run(capsys, "sync")[0] == 0
    results = json.loads(run(capsys, "search", "kestrel", "--json")[1])["results"]
    assert sorted((r["host"] or "", r["cwd"]) for r in results) == [("", "/home/u/here"), ("devbox", "/srv/box")]
    shown = {json.loads(run(capsys, "show", r["shortId"], "--json")[1])["session"]["cwd"] for r in results}
    assert shown == {"/home/u/here", "/srv/box"}
    for host, cwd in (("devbox", "/srv/box"), ("local", "/home/u/here")):   # the local page filters by host too
        page = sesame.page_search(sesame.Context(), {"q": ["kestrel"], "host": [host]})
        assert [r["cwd"] for r in page["results"]] == [cwd]


# ==================================================================================================
# MCP server, driven as a subprocess the way an agent runs it
# ==================================================================================================


def test_word_counts_kept_for_the_next_search_are_dropped_once_the_index_changes(env, capsys):
    # expand_query's counts are kept beside the index for the next command (Store._kept_counts). A
    # count kept from before a session was indexed ("zebrafinch": in no document, so left out of
    # the query as not found anywhere) must not outlive it, whichever process indexed it.
    for i in range(6):
        PiWriter(env, "old-%d" % i).user("the gutter by crossing %d is blocked again" % i).save()

    def first(*argv):
        found = search_json(capsys, "zebrafinch gutter", *argv)
        return found["results"][0]["sessionId"], found["results"][0]["matchedAllTerms"]

    assert first()[1] is False   # only "gutter" is anywhere
    counts = os.path.join(os.environ["SESAME_DATA_DIR"], "counts")
    assert json.load(open(counts))["counts"] and "gutter" not in open(counts).read()   # checksums, not words
    PiWriter(env, "new-1").user("the zebrafinch nest is in the gutter").save()
    assert first() == ("new-1", True)           # the search's own refresh read it
    assert first("--no-refresh") == ("new-1", True)
    PiWriter(env, "new-2").user("a second zebrafinch nest, not in the gutter: under the eaves").save()
    subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "index"], check=True, capture_output=True)
    assert search_json(capsys, "eaves zebrafinch", "--no-refresh")["results"][0]["sessionId"] == "new-2"
    # The MCP server's kept index sees its own and other processes' commits alike.
    warm = sesame.WarmIndex()
    try:
        def mcp(q):
            reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "search", "arguments": {"query": q, "max_chars": 0}}}, warm)
            return [(r["sessionId"], r["matchedAllTerms"]) for r in reply["result"]["structuredContent"]["results"]]
        assert mcp("hatchling gutter")[0][1] is False
        PiWriter(env, "new-3").user("the hatchling fell into the gutter").save()
        subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "index"], check=True, capture_output=True)
        assert mcp("hatchling gutter")[0] == ("new-3", True)
    finally:
        warm.close()


def test_the_servers_second_process_reads_some_candidates_and_changes_no_result(env, monkeypatch):
    """`sesame mcp` forks a helper that reads some of a search's candidates (best chunks) while the
    call reads the others (_PoolHelper). Every result, match and snippet is what the call alone
    gives, whether the helper answers, is gone, or was left busy by a call that stopped early."""
    def write(n, last=None):   # (`last`: the last answer says that instead: as many chunks, other text)
        w = PiWriter(env, "pool-%02d" % n, cwd="/home/dev/p%d" % (n % 3))
        for k in range(n % 4 + 1):
            w.user("the %s marmoset %s lantern %s" % ("quiet" * k, "deck " * n, "harbour " * (k + 1)))
            w.assistant(last if last and k == n % 4 else
                        "the marmoset is far from the lantern and the harbour is %d miles away" % (n + k))
        w.save()
    for n in range(14):   # more sessions holding all three words than a page re-ranks (PROXIMITY_TOP)
        write(n)
    sesame.main(["index"])

    def results(warm, q):
        reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "search", "arguments": {"query": q, "max_chars": 0, "fields": "full"}}}, warm)
        return reply["result"]["structuredContent"]["results"]

    queries = ["marmoset lantern harbour", "harbour marmoset", "quiet lantern deck", "marmoset"]
    alone = sesame.WarmIndex()
    try:
        expected = {q: results(alone, q) for q in queries}
    finally:
        alone.close()
    assert len(expected[queries[0]]) >= 10 and expected[queries[0]][0]["matches"]
    warm = sesame.WarmIndex()
    warm.helper = sesame._PoolHelper()   # (forked before the call's reads are slowed below)
    read_here = []
    original = sesame.best_chunks

    def slow(store, session, *a, **kw):   # the call reads slowly: the helper surely takes some
        read_here.append(session["id"])
        time.sleep(0.02)
        return original(store, session, *a, **kw)
    monkeypatch.setattr(sesame, "best_chunks", slow)
    try:
        for q in queries:
            del read_here[:]
            assert results(warm, q) == expected[q], q
            if len(q.split()) >= sesame.PROXIMITY_WORDS:   # ten candidates re-ranked: the helper read most
                assert len(read_here) <= 5, q
            else:   # (one or two words: nothing re-ranked, the call reads what it shows)
                assert len(read_here) >= len(expected[q]), q
        # A call whose page is one result, then others: each as the call alone gives it.
        sesame.handle_message({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search", "arguments": {"query": queries[0], "limit": 1}}}, warm)
        assert results(warm, queries[2]) == expected[queries[2]]
        assert results(warm, queries[1]) == expected[queries[1]]
        # A session written by the server's own refresh: both processes keep the other sessions'
        # parts (the helper is told which the server wrote) and read that one anew.
        write(7, "the marmoset swam to the lantern by the harbour: a lanternfish")   # (its parts' ranges as before)
        del read_here[:]
        got = results(warm, queries[0])
        assert len(read_here) <= 5   # (the helper read most of them, the session written among them)
        alone = sesame.WarmIndex()
        try:
            assert got == results(alone, queries[0])
        finally:
            alone.close()
        assert any("lanternfish" in m["snippet"] for r in got if r["sessionId"] == "pool-07" for m in r["matches"])
        expected[queries[0]] = got
        # The helper killed: the call reads every candidate itself, with the same results.
        os.kill(warm.helper.pid, signal.SIGKILL)
        os.waitpid(warm.helper.pid, 0)
        del read_here[:]
        assert results(warm, queries[0]) == expected[queries[0]]
        assert len(read_here) >= 10 and warm.helper.gone
    finally:
        warm.close()
        warm.helper.close()


def test_the_servers_helper_ends_with_the_server(sessions, tmp_path):
    """No process outlives `sesame mcp`: its helper ends when the client closes the server's input,
    and when the server is killed."""
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs /proc to list a process's children")

    def children(pid):
        return [int(c) for t in os.listdir("/proc/%d/task" % pid)
                for c in open("/proc/%d/task/%s/children" % (pid, t)).read().split()]

    def alive(pid):
        try:
            return open("/proc/%d/stat" % pid).read().split(") ")[1][0] != "Z"
        except OSError:
            return False
    for end in ("close", "kill"):
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sesame.py"), "mcp"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
        try:
            proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", '
                             b'"arguments": {"query": "carousel landing"}}}\n')
            proc.stdin.flush()
            assert "cccc1111-carousel" in proc.stdout.readline().decode()
            helpers = children(proc.pid)
            assert len(helpers) == 1 and alive(helpers[0])
            if end == "close":
                proc.stdin.close()
                assert proc.wait(timeout=60) == 0
            else:
                proc.kill()
                proc.wait(timeout=60)
            deadline = time.time() + 10
            while alive(helpers[0]) and time.time() < deadline:
                time.sleep(0.05)
            assert not alive(helpers[0]), end
        finally:
            if proc.poll() is None:
                proc.kill()


def test_the_server_keeps_the_parts_it_read_until_the_index_changes(env, monkeypatch):
    """A server keeps the chunks of the parts its searches read (Store.part_chunks) for the next
    call, which often shares them (a word of the question changed): they are not read again. A
    session rewritten since, by the server's own refresh or by another process's `index`, is read
    anew: its matches show what it says now."""
    def write(word):
        w = PiWriter(env, "kept-1")
        w.user("the quokkafig orchard needs %s before the frost" % word).assistant("noted, %s it is" % word)
        w.save()
    write("pruning")
    PiWriter(env, "other-1", cwd="/home/dev/other").user("the orchard frost came early this year").save()
    read = []
    original = sesame.Store.match_chunks

    def counting(self, sid, part, *a):
        read.append(sid)
        return original(self, sid, part, *a)
    monkeypatch.setattr(sesame.Store, "match_chunks", counting)
    warm = sesame.WarmIndex()
    try:
        def mcp(q, **kw):
            reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "search", "arguments": dict({"query": q, "max_chars": 0, "fields": "full"}, **kw)}}, warm)
            top = reply["result"]["structuredContent"]["results"][0]
            return top["sessionId"], " ".join(m["snippet"] for m in top["matches"])

        def mcp_all(q):
            reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "search", "arguments": {"query": q, "max_chars": 0, "fields": "full"}}}, warm)
            return [(r["sessionId"], " ".join(m["snippet"] for m in r["matches"]))
                    for r in reply["result"]["structuredContent"]["results"]]

        def row_id(session_id):
            con = sqlite3.connect(os.path.join(os.environ["SESAME_DATA_DIR"], "index.sqlite"))
            try:
                return con.execute("SELECT id FROM sessions WHERE session_id = ?", (session_id,)).fetchone()[0]
            finally:
                con.close()
        assert mcp("quokkafig orchard pruning") == ("kept-1", mcp("quokkafig orchard pruning")[1])
        assert "pruning" in mcp("quokkafig orchard pruning")[1]
        del read[:]
        assert mcp("quokkafig orchard frost")[0] == "kept-1" and read == []   # kept from the call before
        assert {s for s, _ in mcp_all("orchard frost")} == {"kept-1", "other-1"}
        write("grafting")
        assert mcp("quokkafig grafting") == ("kept-1", mcp("quokkafig grafting")[1])
        assert "grafting" in mcp("quokkafig grafting")[1] and read   # the server's refresh wrote: read anew
        del read[:]   # (the server wrote kept-1 alone, read anew above: other-1's part is still kept)
        assert "grafting" in dict(mcp_all("orchard frost"))["kept-1"] and read == []
        write("watering")
        subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "index"], check=True, capture_output=True)
        del read[:]
        got = mcp("quokkafig watering", no_refresh=True)
        assert got[0] == "kept-1" and "watering" in got[1] and "grafting" not in got[1] and read
        del read[:]   # (another process wrote: which sessions, the server cannot tell: all read anew)
        mcp_all("orchard frost")
        assert row_id("other-1") in read
    finally:
        warm.close()


def test_the_servers_helper_keeps_the_parts_of_sessions_the_server_did_not_write(env, monkeypatch):
    """The server's helper has a connection of its own, to which every commit is another's: it is
    told which sessions the server wrote (changes_for_helper, sent with each share) and keeps the
    parts of the others; when anyone else wrote, it reads every part anew."""
    for sid, word in (("help-x", "pruning"), ("help-y", "grafting")):
        PiWriter(env, sid).user("the quokkafig orchard needs %s" % word).assistant("noted").save()
    sesame.main(["index"])
    path = os.path.join(os.environ["SESAME_DATA_DIR"], "index.sqlite")
    server, helper = sesame.Store.open(path), sesame.Store.open(path)
    helper.long_lived = True
    read = []
    original = sesame.Store.match_chunks
    monkeypatch.setattr(sesame.Store, "match_chunks", lambda self, sid, part, *a: read.append(sid) or original(self, sid, part, *a))
    try:
        def row(session_id):
            return helper.con.execute("SELECT id FROM sessions WHERE session_id=?", (session_id,)).fetchone()[0]

        def look(session_id):
            sid = row(session_id)
            first, last = helper.con.execute("SELECT first_seq, last_seq FROM docs WHERE session=?", (sid,)).fetchone()
            return " ".join(helper.part_chunks(sid, (first, last))[1].texts)
        helper.sync_parts(*server.changes_for_helper())
        assert "pruning" in look("help-x") and "grafting" in look("help-y") and len(read) == 2
        # The server's own refresh writes help-x: the helper reads it anew, keeps help-y.
        PiWriter(env, "help-x").user("the quokkafig orchard needs watering").assistant("noted").save()
        ctx = sesame.Context()
        assert sesame.refresh_index(ctx, server, wait_seconds=0) is not None
        del read[:]
        helper.sync_parts(*server.changes_for_helper())
        assert "watering" in look("help-x") and "grafting" in look("help-y") and read == [row("help-x")]
        # Another process writes: which sessions, the server cannot tell: every part is read anew.
        PiWriter(env, "help-x").user("the quokkafig orchard needs mulching").assistant("noted").save()
        subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "index"], check=True, capture_output=True)
        del read[:]
        helper.sync_parts(*server.changes_for_helper())
        assert "mulching" in look("help-x") and "grafting" in look("help-y") and row("help-y") in read
    finally:
        server.close()
        helper.close()


def test_mcp_search_before_any_index_exists_builds_it_and_finds_the_session(env):
    # The first call of a server started before the first index (an agent wired in by `sesame setup`
    # on a new machine) found no index to keep open and was given none: "'NoneType' object has no
    # attribute 'con'".
    PiWriter(env, "first-1").user("the zanzibarquux cache keeps stale prices").save()
    warm = sesame.WarmIndex()
    try:
        reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                       "params": {"name": "search", "arguments": {"query": "zanzibarquux"}}}, warm)
        assert reply["result"]["isError"] is False, reply
        assert [r["sessionId"] for r in reply["result"]["structuredContent"]["results"]] == ["first-1"]
    finally:
        warm.close()


def test_mcp_server_opens_the_index_after_initialize_and_never_makes_one(env, tmp_path):
    # A server warms up (one search on its kept connections, no refresh) once it has answered
    # `initialize`, so that the agent's first call finds the index open. With no index yet it must
    # not make an empty one: the first call builds it from the sessions, as a first search does.
    PiWriter(env, "warm-1").user("the quokkalantern build cache misses on every branch").save()
    index = sesame.Context().index_path

    def server():
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sesame.py"), "mcp"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
        watchdog = threading.Timer(120, proc.kill)   # a server that stops answering fails the test
        watchdog.daemon = True
        watchdog.start()
        return proc

    def ask(proc, id_, method, params):
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode() + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())["result"]

    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}
    found = []
    for first in (True, False):
        proc = server()
        try:
            ask(proc, 1, "initialize", hello)
            ask(proc, 2, "tools/list", {})   # (answered after the warm-up: one line at a time)
            if first:
                assert not os.path.exists(index)
            elif sys.platform.startswith("linux"):   # the index is open before any call
                fds = "/proc/%d/fd" % proc.pid
                assert index in {os.path.realpath(os.path.join(fds, f)) for f in os.listdir(fds)}
            r = ask(proc, 3, "tools/call", {"name": "search", "arguments": {"query": "quokkalantern branch"}})
            assert r["isError"] is False
            found.append([x["sessionId"] for x in r["structuredContent"]["results"]])
        finally:
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
    assert found == [["warm-1"], ["warm-1"]]


def test_mcp_server_full_exchange_over_stdio(sessions, tmp_path):
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sesame.py"), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=str(tmp_path))
    watchdog = threading.Timer(120, proc.kill)  # a server that stops answering fails the test, never hangs it
    watchdog.start()

    def send(obj):
        proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)).encode() + b"\n")
        proc.stdin.flush()

    def ask(id_, method, params=None):
        send({"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})})
        reply = json.loads(proc.stdout.readline())  # every stdout line must be one JSON-RPC message
        assert reply["jsonrpc"] == "2.0" and reply["id"] == id_
        return reply

    def call(id_, tool, args):
        return ask(id_, "tools/call", {"name": tool, "arguments": args})

    try:
        r = ask(1, "initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                  "clientInfo": {"name": "pytest", "version": "1"}})["result"]
        assert r["protocolVersion"] == "2025-03-26" and r["capabilities"] == {"tools": {}}
        assert r["serverInfo"] == {"name": "sesame", "version": sesame.__version__}
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # no reply: the next line answers id 2
        assert ask(2, "ping")["result"] == {}

        tools = {t["name"]: t for t in ask(3, "tools/list")["result"]["tools"]}
        assert set(tools) == {"search", "show", "status"}
        assert tools["search"]["inputSchema"]["required"] == ["query"]
        assert tools["show"]["inputSchema"]["required"] == ["session"]
        assert all(t["inputSchema"]["type"] == "object" and t["description"] for t in tools.values())

        r = call(4, "search", {"query": "carousel landing", "limit": 3})["result"]
        assert r["isError"] is False
        assert r["structuredContent"]["results"][0]["sessionId"] == "cccc1111-carousel"
        assert r["content"][0]["type"] == "text" and 'Found 1 session matching "carousel landing"' in r["content"][0]["text"]
        seq = r["structuredContent"]["results"][0]["matches"][0]["seq"]

        r = call(5, "show", {"session": "cccc1111-carousel", "around": seq, "context": 1, "max_chars": 3000})["result"]
        assert r["isError"] is False
        assert r["structuredContent"]["session"]["name"] == "Landing page carousel"
        assert any(c["seq"] == seq for c in r["structuredContent"]["chunks"])
        assert "Build an image carousel" in r["content"][0]["text"] and len(r["content"][0]["text"]) <= 3000

        r = call(6, "status", {})["result"]
        assert r["isError"] is False and r["structuredContent"]["sessions"] == 4

        r = ask(7, "tools/call", {"name": "no_such_tool", "arguments": {}})  # unknown tool: a protocol error
        assert r["error"]["code"] == -32602 and "no_such_tool" in r["error"]["message"]
        r = call(8, "search", {"limit": 2})["result"]  # missing query: a tool error the model can read
        assert r["isError"] is True and "query" in r["content"][0]["text"]
        r = call(9, "show", {"session": "cccc"})["result"]  # ambiguous: candidates in the text
        assert r["isError"] is True and "cccc2222-billing" in r["content"][0]["text"]

        r = ask(10, "server/discover")
        assert r["error"]["code"] == -32601 and r["error"]["message"].startswith("Method not found")
        send("{not json")
        assert json.loads(proc.stdout.readline()) == {"jsonrpc": "2.0", "id": None,
                                                      "error": {"code": -32700, "message": "Parse error"}}
        send({"jsonrpc": "1.0", "id": 11, "method": "ping"})
        assert json.loads(proc.stdout.readline())["error"]["code"] == -32600
        assert ask(12, "ping")["result"] == {}  # the server is still alive after every failure

        proc.stdin.close()  # end of input: the server exits 0 with nothing more on stdout
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == b""
        assert b"sesame mcp: serving" in proc.stderr.read()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()


def mcp_call(tool, arguments):
    reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": tool, "arguments": arguments}})
    return reply["result"]


def test_mcp_tools_take_every_option_of_their_command_in_snake_case(corpus, capsys):
    tools = {t["name"]: t["inputSchema"] for t in sesame.handle_message(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]}
    assert set(tools["search"]["properties"]) == {"query", "limit", "offset", "cwd", "after", "before", "agent", "host",
                                                  "tools", "tool", "path", "no_refresh", "fields", "max_chars"}
    assert set(tools["show"]["properties"]) == {"session", "around", "context", "max_chars", "tools", "all",
                                                "no_refresh"}
    assert tools["search"]["properties"]["max_chars"]["type"] == "integer"
    assert tools["search"]["properties"]["tool"]["type"] == "array"
    r = mcp_call("search", {"query": "upload bucket", "fields": "minimal", "max_chars": 0, "no_refresh": True})
    assert r["isError"] is False and set(r["structuredContent"]["results"][0]) == set(sesame.FIELD_PRESETS["minimal"])
    r = mcp_call("search", {"query": "upload", "tool": "bash"})
    assert [x["sessionId"] for x in r["structuredContent"]["results"]] == ["efef9999-toolonly"]
    r = mcp_call("search", {"query": "upload", "limit": "three"})
    assert r["isError"] is True and "an integer" in r["content"][0]["text"]


def test_mcp_search_is_bounded_like_the_cli_and_pages_to_the_end(corpus, capsys):
    everything = search_ids(capsys, "the", "--limit", "50", "--max-chars", "0")
    for budget in (1, 300, 1500):
        ids, offset = [], 0
        for _ in range(60):
            r = mcp_call("search", {"query": "the", "limit": 4, "offset": offset, "max_chars": budget})
            data = r["structuredContent"]
            ids += [x["sessionId"] for x in data["results"]]
            if not data["hasMore"]:
                break
            assert "offset: %d" % data["nextOffset"] in r["content"][0]["text"]
            assert "--offset" not in r["content"][0]["text"]
            offset = data["nextOffset"]
        assert ids == everything
    r = mcp_call("search", {"query": "the", "limit": 50})
    assert len(json.dumps(r["structuredContent"], ensure_ascii=False, separators=(",", ":"))) <= sesame.DEFAULT_MAX_CHARS


def test_mcp_arguments_a_model_writes_loosely_are_taken_as_meant(corpus):
    # Models write numbers and booleans as strings now and then, a query as a list of words, the
    # fields as a list: each was refused ("argument 'limit' must be an integer"), the call lost.
    def call(name, **args):
        r = sesame.call_tool({"name": name, "arguments": args})
        return r["isError"], r.get("structuredContent") or r["content"][0]["text"]

    _, want = call("search", query="flake overlays", limit=1, no_refresh=True, max_chars=0)
    for args in ({"limit": "1"}, {"limit": 1.0}, {"limit": " 1 ", "no_refresh": "true", "tools": "false"},
                 {"limit": 1, "no_refresh": "yes", "offset": None, "max_chars": "0"}):
        loose = dict({"query": "flake overlays", "no_refresh": True, "max_chars": 0}, **args)
        assert call("search", **loose) == (False, want), args
    assert call("search", query=["flake", "overlays"], limit=1, no_refresh=True, max_chars=0) == (False, want)
    error, data = call("search", query="flake overlays", fields=["sessionId", "title"], limit=1, no_refresh=True)
    assert not error and set(data["results"][0]) == {"sessionId", "title"}
    error, data = call("show", session=want["results"][0]["sessionId"], around=str(want["results"][0]["matches"][0]["seq"]))
    assert not error and data["session"]["sessionId"] == want["results"][0]["sessionId"]
    # An agent's name as the command line takes it (the schema's enum lists the ids).
    assert call("search", query="flake overlays", agent="Pi Agent", limit=1, no_refresh=True, max_chars=0) == (False, want)
    query = {t["name"]: t for t in sesame._tool_list()}["search"]["inputSchema"]["properties"]["query"]
    assert "--" not in query["description"] and '"-word"' in query["description"]
    for args, why in (({"limit": "five"}, "must be an integer"), ({"limit": 2.5}, "must be an integer"),
                      ({"tools": "maybe"}, "must be a boolean"), ({"limit": "-3"}, "at least"),
                      ({"agent": "nosuch"}, "must be one of")):
        error, text = call("search", query="flake", **args)
        assert error and why in text, (args, text)


def test_mcp_show_text_names_tool_arguments_not_flags(corpus, capsys):
    w = PiWriter(corpus, "long-talk")
    for i in range(40):
        w.user("message number %d about the long talk" % i)
    w.save()
    r = mcp_call("show", {"session": "long-talk", "max_chars": 1000})
    assert "around: SEQ" in r["content"][0]["text"] and "--around" not in r["content"][0]["text"]


def test_mcp_errors_are_one_readable_sentence(corpus, capsys):
    reply = sesame.handle_message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})
    assert "needs a tool name" in reply["error"]["message"] and "None" not in reply["error"]["message"]
    r = mcp_call("search", {"query": "x", "colour": True})
    assert r["isError"] and "unknown argument 'colour'" in r["content"][0]["text"]


def test_the_mcp_server_keeps_the_index_open_across_calls_and_reopens_a_replaced_one(corpus, capsys, monkeypatch,
                                                                                      tmp_path):
    opened, real_open = [], sesame.Store.open
    monkeypatch.setattr(sesame.Store, "open", lambda path, create=True: opened.append(path) or real_open(path, create))
    warm = sesame.WarmIndex()

    def found(query):
        reply = sesame.handle_line(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "search", "arguments": {"query": query}}}), warm)
        return [r["sessionId"] for r in reply["result"]["structuredContent"]["results"]]
    try:
        first = found("carousel landing")
        assert first and found("billing") != [] and len(opened) == 1   # one open index for every call
        for name in os.listdir(str(tmp_path / "data")):        # the index is removed and built anew
            if name.startswith("index.sqlite"):
                os.remove(str(tmp_path / "data" / name))
        monkeypatch.setattr(sesame.Store, "open", real_open)
        assert run(capsys, "index")[0] == 0
        monkeypatch.setattr(sesame.Store, "open", lambda path, create=True: opened.append(path) or real_open(path, create))
        assert found("carousel landing") == first and len(opened) == 2
    finally:
        warm.close()


def test_an_mcp_call_refreshes_active_files_and_leaves_the_old_ones_to_the_background(history, env, capsys,
                                                                                      counted_stats):
    warm = sesame.WarmIndex()

    def found(query):
        return [r["sessionId"] for r in sesame.call_tool({"name": "search", "arguments": {"query": query}},
                                                         warm)["structuredContent"]["results"]]
    try:
        path = PiWriter(env, "active", cwd="/home/dev/p2").user("working on the quokka feature").save()
        assert found("quokka") == ["active"]
        append_user(path, "and now the wallaby part")
        del counted_stats[:]
        assert found("wallaby") == ["active"]
        # its folder changed (listed again) and nothing else: no sweep, _keep_fresh compares the old
        # files in the background
        assert path in counted_stats and {os.path.dirname(p) for p in counted_stats} == {os.path.dirname(path)}
    finally:
        warm.close()


def during_background_refresh(monkeypatch, busy, act):
    """Start the MCP server's background refresh (_keep_fresh, in a thread named "background"),
    wait until it is at work (5 entries in `busy`, which the caller's slowed step fills), run
    act(warm) with an MCP server's WarmIndex, then stop it. Returns what was logged."""
    import threading
    errors = []
    monkeypatch.setattr(sesame, "_stderr", errors.append)
    warm = sesame.WarmIndex()
    stop = threading.Event()
    worker = threading.Thread(target=sesame._keep_fresh, args=(stop, 0.01), name="background", daemon=True)
    try:
        worker.start()
        for _ in range(500):
            if len(busy) >= 5:
                break
            time.sleep(0.005)
        assert 5 <= len(busy) < 30   # the background run is at work
        act(warm)
    finally:
        stop.set()
        worker.join(30)
        warm.close()
    return errors


def finds_its_append(monkeypatch, history, then=lambda: None):
    """An act for during_background_refresh: append to a session of this folder and call search;
    the call must find the append within 0.3 s (the slowed background run takes 0.4 s or more)."""
    monkeypatch.chdir(history.project)

    def act(warm):
        append_user(history[12], "written during the background refresh: the okapi plan")
        t = time.monotonic()
        reply = sesame.call_tool({"name": "search", "arguments": {"query": "okapi"}}, warm)
        assert [r["sessionId"] for r in reply["structuredContent"]["results"]] == ["old-12"]
        assert time.monotonic() - t < 0.3
        then()
    return act


def background_round(**kw):
    """One round of a server's background refresh (as _keep_fresh runs it), in this thread: its summary."""
    ctx = sesame.Context()
    store = ctx.store()
    try:
        return sesame.refresh_index(ctx, store, wait_seconds=0, lend=True, **kw)
    finally:
        store.close()


def test_a_call_lent_the_turn_during_the_background_look_writes_only_under_the_index_lock(
        history, env, capsys, monkeypatch):
    # The background's look at every file holds no index lock; a call it lends its turn to then
    # (between two sources it lists) takes the lock itself like any search: while another process
    # holds it, the call writes nothing (one indexer at a time), and its next call reads the new session.
    import threading
    import time
    real_list = sesame.list_source
    looking = threading.Event()

    def slow_list(src, summary):
        if threading.current_thread().name == "background":
            looking.set()
            time.sleep(0.4)
        return real_list(src, summary)
    monkeypatch.setattr(sesame, "list_source", slow_list)
    monkeypatch.setattr(sesame, "CALL_LOCK_WAIT", 0.05)
    monkeypatch.setattr(sesame, "LEND_WAIT", 2.0)   # (the call waits for the look's next safe point)
    pi2 = env.parent / "pi-two"   # (a second source: the look lends its turn between sources)
    PiWriter(pi2, "other-1").user("the other source").save()
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "pi", "path": str(pi2)}]}, env.parent)
    assert run(capsys, "index")[0] == 0
    PiWriter(env, "new-01", cwd="/home/dev/p1").user("a late aardwolf question").save()   # (its folder's time moves)
    other = sesame.IndexLock(os.environ["SESAME_DATA_DIR"])
    assert other.acquire(0)   # another process indexing
    warm = sesame.WarmIndex()

    t = threading.Thread(target=background_round, name="background")
    try:
        t.start()
        assert looking.wait(5)
        time.sleep(0.05)
        reply = sesame.call_tool({"name": "search", "arguments": {"query": "aardwolf"}}, warm)
        assert not reply["isError"] and reply["structuredContent"]["results"] == []
    finally:
        other.release()
        t.join(10)
    reply = sesame.call_tool({"name": "search", "arguments": {"query": "aardwolf"}}, warm)
    assert [r["sessionId"] for r in reply["structuredContent"]["results"]] == ["new-01"]
    warm.close()


def test_the_background_refresh_waits_for_a_call_in_its_turn_rather_than_skip_its_round(history, env, capsys):
    # A busy client's calls hold the turn a third of the time: the background run, every 30 s,
    # skipped its round whenever one did (and a merge or an upgrade's reading waited 30 s more).
    import threading
    PiWriter(env, "late", cwd="/home/dev/p9").user("the serval notes").save()
    guard = sesame._run_guard()
    assert guard.enter(1, True)   # a call in its turn, for 0.2 s more
    threading.Timer(0.2, guard.leave, args=(True,)).start()
    summary = background_round()
    assert summary is not None and summary.indexed == 1
    assert search_ids(capsys, "serval", "--no-refresh") == ["late"]


def test_a_search_in_another_process_reads_its_append_during_a_background_merge(
        history, env, capsys, monkeypatch, tmp_path):
    # A server's background merge (4.6 s at 1 GB after an upgrade) held the index lock: every other
    # process's search with something to read waited a second for it, then answered without it. The
    # merge reads no file and each step is a transaction: it runs with the lock let go.
    import threading
    _bloated_index(env, capsys, monkeypatch, tmp_path)
    monkeypatch.setattr(sesame, "COMPACT_PAGES", 1)
    real_step, steps = sesame.Store.merge_step, []

    def slow_step(store):
        steps.append(time.monotonic())
        time.sleep(0.1)   # (~35 steps: 3.5 s, where a search waits a second for the lock)
        return real_step(store)
    monkeypatch.setattr(sesame.Store, "merge_step", slow_step)
    path = history[12]

    t = threading.Thread(target=background_round, name="background")
    t.start()
    try:
        for _ in range(500):
            if len(steps) >= 3:
                break
            time.sleep(0.01)
        append_user(path, "a sudden okapi question")
        r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "search", "okapi", "--json"],
                           env=dict(os.environ), capture_output=True, text=True, cwd=str(tmp_path / "p0"))
        during = len(steps)
    finally:
        t.join(60)
    assert r.returncode == 0 and "another sesame index is running" not in r.stderr, r.stderr
    assert [x["sessionId"] for x in json.loads(r.stdout)["results"]] == ["old-12"]
    assert len(steps) > during + 5   # (the merge went on after it)
    assert _index_meta(tmp_path, "fts_dead") == "0"


def test_an_mcp_call_during_the_background_merge_of_the_full_text_index_reads_its_append(
        history, env, capsys, monkeypatch, tmp_path):
    # After an upgrade read every file again, the server's background refresh merges the replaced
    # text out of the full-text index (4.6 s at 1 GB), a step at a time: a call gets its turn between
    # two steps (slowed here to 20 ms each) and reads its append; the merge then goes on to its end.
    import threading
    fresh = _bloated_index(env, capsys, monkeypatch, tmp_path)
    monkeypatch.setattr(sesame, "COMPACT_PAGES", 1)
    real_step, steps = sesame.Store.merge_step, []

    def slow_step(store):
        if threading.current_thread().name == "background":
            steps.append(time.monotonic())
            time.sleep(0.02)
        return real_step(store)
    # Every few steps it copies the log into the index (a checkpoint: 20 ms, up to 0.3 s at 1 GB),
    # slowed here to 0.25 s: the call comes during one, and does not wait for it.
    real_checkpoint, in_checkpoint = sesame.Store.checkpoint, threading.Event()

    def slow_checkpoint(store):
        if threading.current_thread().name == "background":
            in_checkpoint.set()
            time.sleep(0.25)
        return real_checkpoint(store)
    monkeypatch.setattr(sesame.Store, "merge_step", slow_step)
    monkeypatch.setattr(sesame.Store, "checkpoint", slow_checkpoint)
    call = finds_its_append(monkeypatch, history)

    def act(warm):
        assert in_checkpoint.wait(10)
        call(warm)
    assert during_background_refresh(monkeypatch, steps, act) == []
    assert len(steps) >= 20   # it went on after the call
    assert _fts_bytes(tmp_path) <= 1.1 * fresh and _index_meta(tmp_path, "fts_dead") == "0"
    assert search_ids(capsys, "okapi", "--no-refresh") == ["old-12"]


def test_an_mcp_call_during_the_background_refresh_still_reads_what_was_just_appended(history, capsys, monkeypatch):
    # The server's background refresh compares every file under the index lock (~0.1 s at 1 GB);
    # made slow here (10 ms a file). A call meanwhile gets its turn between two files and reads the
    # append itself, instead of skipping its refresh; the background run then goes on and ends well.
    import threading
    monkeypatch.setattr(sesame, "LEND_FILES", 1)
    real_stat, compared = os.stat, []

    def slow_stat(path, *a, **kw):
        if threading.current_thread().name == "background" and str(path).endswith(".jsonl"):
            compared.append(path)
            time.sleep(0.01)
        return real_stat(path, *a, **kw)
    monkeypatch.setattr(os, "stat", slow_stat)
    real_parse, parsed = sesame.parse_file, []

    def spy_parse(path, *a, **kw):
        if threading.current_thread().name == "background":
            parsed.append(path)
        return real_parse(path, *a, **kw)
    monkeypatch.setattr(sesame, "parse_file", spy_parse)
    assert during_background_refresh(monkeypatch, compared, finds_its_append(monkeypatch, history)) == []
    assert search_ids(capsys, "okapi", "--no-refresh") == ["old-12"]
    assert str(history[12]) not in parsed   # the call read it: the run, which found it changed, not again


def slow_background_parse(monkeypatch):
    """parse_file made slow (20 ms a file) in the background thread; returns the files it parsed."""
    import threading
    real_parse, parsed = sesame.parse_file, []

    def slow_parse(path, *a, **kw):
        if threading.current_thread().name == "background":
            parsed.append(path)
            time.sleep(0.02)
        return real_parse(path, *a, **kw)
    monkeypatch.setattr(sesame, "parse_file", slow_parse)
    return parsed


def test_an_mcp_call_while_the_background_refresh_reads_every_file_again_still_reads_its_append(
        history, capsys, monkeypatch, tmp_path):
    # After an upgrade the server's background refresh reads every file again (minutes at 1 GB);
    # made slow here. Between two files it lends its turn: a call reads the append itself, answers,
    # and the run goes on, reading that file on from there or not at all.
    new = sesame.PiParser.version + 1
    monkeypatch.setattr(sesame.PiParser, "version", new)
    parsed = slow_background_parse(monkeypatch)

    def all_read():
        for _ in range(1000):
            if set(_versions(tmp_path).values()) == {new}:
                break
            time.sleep(0.01)
    assert during_background_refresh(monkeypatch, parsed, finds_its_append(monkeypatch, history, then=all_read)) == []
    assert set(_versions(tmp_path).values()) == {new}   # the run read them all
    code, out, _ = run(capsys, "show", "old-12", "--json", "--no-refresh")
    chunks = json.loads(out)["chunks"]
    assert sum("okapi" in c["text"] for c in chunks) == 1, chunks   # the append once
    assert search_ids(capsys, "routine", "--no-refresh", "--limit", "50") == search_ids(capsys, "routine", "--limit", "50")


def test_a_background_rebuild_lends_no_turn_and_a_call_meanwhile_answers_at_once(history, env, capsys, monkeypatch,
                                                                                 tmp_path):
    # A changed `exclude` makes the background run rebuild the index in one transaction (searches
    # see the old index until it commits): no safe point to lend its turn there. A call meanwhile
    # answers at once from the index as it is, instead of waiting for SQLite's lock (30 s) or seeing
    # a rebuild committed half-way.
    write_config({"sources": [{"parser": "pi", "path": str(env)}], "exclude": ["/nowhere/at/all"]}, tmp_path)
    parsed = slow_background_parse(monkeypatch)

    def act(warm):
        t = time.monotonic()
        reply = sesame.call_tool({"name": "search", "arguments": {"query": "routine", "limit": 50, "max_chars": 0}},
                                 warm)
        assert not reply["isError"] and time.monotonic() - t < 2, reply
        assert len(reply["structuredContent"]["results"]) == 40   # the old index, whole
        for _ in range(1000):
            if len(parsed) >= 40 and search_ids(capsys, "routine", "--no-refresh", "--limit", "50"):
                break
            time.sleep(0.01)
    logged = during_background_refresh(monkeypatch, parsed, act)
    assert set(logged) <= {"sesame: another sesame index is running; using the index as it is"}, logged
    assert len(search_ids(capsys, "routine", "--no-refresh", "--limit", "50")) == 40


def test_after_an_upgrade_an_mcp_call_reads_nothing_again_and_the_background_refresh_reads_all(
        history, env, capsys, monkeypatch, tmp_path):
    pi = sesame.PARSERS["pi"]
    monkeypatch.setattr(sesame.PiParser, "version", pi.version + 1)
    warm = sesame.WarmIndex()
    try:
        for _ in range(2):   # the first call looks at every file (the parsers changed), the next by the rules
            reply = sesame.call_tool({"name": "search", "arguments": {"query": "routine"}}, warm)
            assert not reply["isError"] and reply["structuredContent"]["results"]
            assert set(_versions(tmp_path).values()) == {pi.version - 1}   # answered warm, nothing read again
    finally:
        warm.close()
    assert "earlier version" not in capsys.readouterr().err
    ctx = sesame.Context()
    store = ctx.store()
    try:
        sesame.refresh_index(ctx, store, wait_seconds=0)   # what the server's background refresh runs
    finally:
        store.close()
    assert set(_versions(tmp_path).values()) == {pi.version}


def test_the_word_counts_an_mcp_server_keeps_from_call_to_call_follow_every_change_of_the_index(history, env,
                                                                                                capsys):
    """The server keeps the counts a search asks first (in how many documents a word occurs, the
    vocabulary near a misspelt word) while the index is unchanged: a word asked for while no session
    held it must be found once one does, whether the call's own refresh wrote it or another process
    (the background refresh, a `sesame index`) did."""
    warm = sesame.WarmIndex()

    def found(query, **args):
        return [r["sessionId"] for r in sesame.call_tool({"name": "search", "arguments": dict(args, query=query)},
                                                         warm)["structuredContent"]["results"]]
    try:
        path = PiWriter(env, "active", cwd="/home/dev/p2").user("working on the quokka feature").save()
        assert found("quokka") == ["active"]
        assert found("wallaby") == [] and found("wallaby") == []   # counted 0, and kept
        assert warm.store._counts and warm.store._counts_state   # (see Store._kept_counts)
        append_user(path, "and now the wallaby part")
        assert found("wallaby") == ["active"]   # written by this call's own refresh
        assert found("numbat") == []
        other = PiWriter(env, "other", cwd="/home/dev/p3").user("the numbat enclosure").save()
        assert run(capsys, "index")[0] == 0     # written by another connection (this call writes nothing)
        assert found("numbat", no_refresh=True) == ["other"]
        assert found("numbta", no_refresh=True) == ["other"]   # the vocabulary near a misspelt word
        assert found("okapi") == []      # (the folders this call's refresh compared are kept too)
        third = PiWriter(env, "third", cwd="/home/dev/p4").user("the okapi paddock").save()   # a new folder
        assert found("okapi") == ["third"]
        # (and so are the newest files it compares: those written since are among them)
        append_user(third, "and the tapir paddock")
        assert found("tapir") == ["third"]
        append_user(other, "and the dugong enclosure")
        assert found("dugong") == ["other"]
    finally:
        warm.close()


def test_the_newest_files_an_mcp_server_keeps_from_call_to_call_follow_every_change_of_the_index(
        env, capsys, monkeypatch, tmp_path):
    """The server keeps the list of the newest files each call compares (Claude Code: no journal
    line for an append, so that list is what finds it) while the index is unchanged: a session
    indexed since, by the call's own refresh or by another process, is among them at the next call."""
    root = tmp_path / "home" / ".claude" / "projects"

    def session(project, sid, text):
        return write_jsonl(root / project / (sid + ".jsonl"), [dict(cc_cl_user("u-" + sid, "2026-01-01T10:00:00.000Z",
                                                                               text), sessionId=sid)])
    session("-a", "11111111-2222-4333-8444-555555555555", "the quokka census")
    write_config({"sources": [{"parser": "claude", "path": str(root)}]}, tmp_path)
    assert run(capsys, "index")[0] == 0
    monkeypatch.chdir(tmp_path)   # a folder of no session
    warm = sesame.WarmIndex()

    def found(query):
        return [r["sessionId"] for r in sesame.call_tool({"name": "search", "arguments": {"query": query}},
                                                         warm)["structuredContent"]["results"]]
    try:
        def settle(path):   # written an hour ago: still among the newest, its folder's time settled
            hour_ago = time.time() - 3600
            for p in (path, os.path.dirname(str(path))):
                os.utime(str(p), (hour_ago, hour_ago))
            assert found("nothing-of-the-sort") == []   # (the next call records it so)
        assert found("quokka") == ["11111111-2222-4333-8444-555555555555"]
        new = session("-b", "22222222-2222-4333-8444-555555555555", "the tapir census")   # a new project
        assert found("tapir") == ["22222222-2222-4333-8444-555555555555"]   # this call's refresh wrote it
        settle(new)
        with open(str(new), "a") as f:
            f.write(line(dict(cc_cl_user("u-2b", "2026-01-01T10:01:00.000Z", "and the margay"),
                              sessionId="22222222-2222-4333-8444-555555555555")))
        assert found("margay") == ["22222222-2222-4333-8444-555555555555"]
        third = session("-c", "33333333-2222-4333-8444-555555555555", "the okapi census")
        assert run(capsys, "index")[0] == 0   # another process wrote it
        assert found("okapi") == ["33333333-2222-4333-8444-555555555555"]
        settle(third)
        with open(str(third), "a") as f:
            f.write(line(dict(cc_cl_user("u-3b", "2026-01-01T10:01:00.000Z", "and the serval"),
                              sessionId="33333333-2222-4333-8444-555555555555")))
        assert found("serval") == ["33333333-2222-4333-8444-555555555555"]
    finally:
        warm.close()


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the MCP Python SDK needs Python 3.10+")
def test_the_official_mcp_python_sdk_client_uses_every_tool(corpus, tmp_path):
    mcp = pytest.importorskip("mcp", reason="the MCP Python SDK is not installed (pip install mcp)")
    import asyncio
    from mcp.client.stdio import StdioServerParameters, stdio_client

    def data(result):   # SDK 1.x spells it structuredContent, 2.x structured_content
        return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)

    def failed(result):
        return getattr(result, "is_error", None) or getattr(result, "isError", None)

    async def session(errlog):
        params = StdioServerParameters(command=sys.executable, args=[os.path.join(HERE, "sesame.py"), "mcp"],
                                       env=dict(os.environ))
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with mcp.ClientSession(read, write) as client:
                await client.initialize()
                names = sorted(t.name for t in (await client.list_tools()).tools)
                found = await client.call_tool("search", {"query": "the", "limit": 2, "max_chars": 600})
                page2 = await client.call_tool("search", {"query": "the", "limit": 2,
                                                          "offset": data(found)["nextOffset"]})
                shown = await client.call_tool("show", {"session": "cccc3333", "around": 1})
                status = await client.call_tool("status", {})
                bad = await client.call_tool("show", {"session": "no-such-session-at-all"})
                return names, found, page2, shown, status, bad

    with open(str(tmp_path / "server.log"), "w") as errlog:   # the server's stderr (pytest's has no file)
        names, found, page2, shown, status, bad = asyncio.run(session(errlog))
    assert names == ["search", "show", "status"]
    assert not failed(found) and data(found)["results"] and data(found)["hasMore"]
    first = {r["sessionId"] for r in data(found)["results"]}
    assert first.isdisjoint(r["sessionId"] for r in data(page2)["results"])
    assert not failed(shown) and data(shown)["session"]["sessionId"] == "cccc3333-ci"
    assert not failed(status) and data(status)["sessions"] >= 10
    assert failed(bad) and "no session matches" in bad.content[0].text


# Words no other session has, that the porter stemmer leaves alone; the tail is checked too, since
# FTS5 stores a term after its neighbour with their common prefix left out.
FORGET_WORDS = ("qzxwvkjhgfdrt", "mlkqwprtzvbn", "wabberjockulx")


def index_file_bytes(tmp_path):
    return b"".join(open(str(tmp_path / "data" / f), "rb").read() for f in os.listdir(tmp_path / "data")
                    if f.startswith("index.sqlite"))


def test_forget_wipes_the_sessions_words_from_the_index_files(corpus, tmp_path, capsys):
    w = PiWriter(corpus, "wipe-me-1", cwd="/home/dev/vbnqzxwv-project")
    w.user("notes on %s and %s" % FORGET_WORDS[:2])
    w.assistant("a long reply about %s: " % FORGET_WORDS[2] + "more and more filler text here. " * 60)
    w.entry("session_info", name="the %s session" % FORGET_WORDS[0])
    path = w.save()
    run(capsys, "index")
    with open(path, "a") as f:   # a rewrite and an append: old versions of its rows are left in free space
        f.write(line({"type": "message", "id": "x1", "parentId": None, "timestamp": "2026-05-01T00:00:00.000Z",
                      "message": {"role": "user", "content": "and %s again" % FORGET_WORDS[1]}}))
    run(capsys, "index")
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace("notes on", "notes about"))
    run(capsys, "index")
    raw = index_file_bytes(tmp_path)
    assert all(word[-8:].encode() in raw for word in FORGET_WORDS)   # the test can see them before
    code, out, err = run(capsys, "forget", "wipe-me-1")
    assert code == 0 and "forgot wipe-me-1" in out, err
    raw = index_file_bytes(tmp_path)
    for word in FORGET_WORDS:
        assert word[-8:].encode() not in raw, word
    assert os.path.getsize(tmp_path / "data" / "index.sqlite-wal") == 0 if os.path.exists(
        tmp_path / "data" / "index.sqlite-wal") else True
    assert search_ids(capsys, FORGET_WORDS[0]) == [] and search_ids(capsys, "carousel") == ["bbbb2222-carousel"]
    code, out, _ = run(capsys, "search", FORGET_WORDS[0][:-1] + "x", "--json")   # no spelling suggestion either
    assert json.loads(out)["results"] == [] and FORGET_WORDS[0] not in out


def test_forget_undo_brings_back_every_copy_of_the_session(env, tmp_path, capsys):
    a = PiWriter(env, "twice-1", cwd="/home/dev/a")
    a.user("the first copy mentions the gecko").save()
    b = PiWriter(tmp_path / "copy", "twice-1", cwd="/home/dev/b", start="2026-03-11T09:00:00.000Z")
    b.user("the second copy mentions the newt").save()
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "pi", "path": str(tmp_path / "copy")}]},
                 tmp_path)
    assert search_ids(capsys, "gecko") == ["twice-1"] and search_ids(capsys, "newt") == ["twice-1"]
    code, out, _ = run(capsys, "forget", "twice-1", "--json")
    assert code == 0 and sorted(json.loads(out)["forgotten"]["files"]) == sorted([a.path, b.path])
    assert search_ids(capsys, "gecko") == [] and search_ids(capsys, "newt") == []
    assert run(capsys, "forget", "--undo", "twice-1")[0] == 0
    assert search_ids(capsys, "newt") == ["twice-1"]    # the copy that forget showed ...
    assert search_ids(capsys, "gecko") == ["twice-1"]   # ... and the other one


def test_forget_on_a_full_disk_or_a_locked_index_is_one_error_and_changes_nothing(corpus, tmp_path, capsys,
                                                                                    monkeypatch):
    def unchanged():
        assert search_ids(capsys, "carousel", "--no-refresh") == ["bbbb2222-carousel"]
        assert json.loads(run(capsys, "forget", "--list", "--json")[1])["forgotten"] == []

    def no_space(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    with monkeypatch.context() as m:
        m.setattr(sesame, "save_forgotten", no_space)
        code, _, err = run(capsys, "forget", "bbbb2222")
        assert code == 1 and one_line_error(err) and "No space left on device" in err, err
    unchanged()

    def disk_full(*a, **kw):
        raise sqlite3.OperationalError("database or disk is full")
    with monkeypatch.context() as m:
        m.setattr(sesame.Store, "forget_session", disk_full)
        code, _, err = run(capsys, "forget", "bbbb2222")
        assert code == 1 and one_line_error(err) and "disk is full" in err and "nothing was forgotten" in err, err
    unchanged()

    other = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")   # another writer that does not finish
    with monkeypatch.context() as m:
        m.setattr(sesame, "BUSY_TIMEOUT", 0.2)
        code, _, err = run(capsys, "forget", "bbbb2222")
        assert code == 1 and one_line_error(err) and "locked" in err and "nothing was forgotten" in err, err
    other.execute("ROLLBACK")
    other.close()
    unchanged()

    held = sesame.IndexLock(str(tmp_path / "data"))
    assert held.acquire(0)
    with monkeypatch.context() as m:
        m.setattr(sesame, "FORGET_LOCK_WAIT", 0.2)
        code, _, err = run(capsys, "forget", "bbbb2222")
        assert code == 1 and one_line_error(err) and "another sesame index" in err, err
    held.release()
    unchanged()

    with monkeypatch.context() as m:   # the session is gone, the wipe is not done: say so, and how to finish it
        m.setattr(sesame.Store, "wipe_free_space", disk_full)
        code, _, err = run(capsys, "forget", "bbbb2222")
        assert code == 1 and one_line_error(err) and "sesame forget bbbb2222-carousel` again" in err, err
    assert search_ids(capsys, "carousel") == []
    code, out, err = run(capsys, "forget", "bbbb2222-carousel")
    assert code == 0 and "forgot bbbb2222-carousel" in out, err


# ---------------------------------------------------------------------------------------------
# Export and the local page: show --format markdown|html, sesame serve
# ---------------------------------------------------------------------------------------------

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>']


@pytest.fixture
def page_sessions(env, tmp_path, capsys):
    """A pi session with a tool call whose output holds backtick runs, one whose text is hostile
    markup, and a Claude Code session with a sub-agent; indexed."""
    w = PiWriter(env, "aaaa1111-fence", cwd="/home/dev/docs", start="2026-01-05T10:00:00.000Z")
    w.user("Why does the readme render the walrus example wrong?")
    w.assistant("Let me look.", thinking="The fences are probably too short.")
    w.tool("bash", {"command": "cat README.md"}, "Example:\n````md\n```js\nwalrus()\n```\n````\nend")
    w.assistant("The inner fence has four backticks: the outer one needs five.")
    name(w, "Walrus readme fences").save()
    w = PiWriter(env, "bbbb2222-hostile", cwd="/home/dev/web", start="2026-01-06T10:00:00.000Z")
    w.user("Sanitise this pangolin comment: " + HOSTILE[0])
    w.assistant("The pangolin attribute is " + HOSTILE[1])
    w.tool("bash", {"command": "echo '%s'" % HOSTILE[0]}, HOSTILE[1])
    w.tool("bash", {"command": "ls --color"}, "\x1b[31mred.txt\x1b[0m")
    name(w, "Pangolin " + HOSTILE[0]).save()
    root = tmp_path / "claude-projects"
    write_jsonl(root / "-proj" / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:00Z", "find the capybara TODO comments"),
        cc_cl_asst("a1", "2026-01-01T00:00:01Z", "m1", [{"type": "text", "text": "I'll ask a sub-agent."}])])
    write_jsonl(root / "-proj" / cc_SID / "subagents" / "agent-a0ad4f.jsonl", [
        cc_cl_user("c1", "2026-01-01T00:00:02Z", "Search the repo for capybara TODO comments", isSidechain=True,
                   agentId="a0ad4f"),
        cc_cl_asst("c2", "2026-01-01T00:00:03Z", "msg_c", [{"type": "text", "text": "Found 3."}], isSidechain=True,
                   agentId="a0ad4f")])
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "claude", "path": str(root)}]}, tmp_path)
    assert run(capsys, "index")[0] == 0
    return tmp_path


def test_markdown_export_has_the_header_and_fences_longer_than_any_backtick_run_inside(page_sessions, capsys):
    code, out, err = show(capsys, "aaaa1111", "--format", "md")
    assert code == 0, err
    assert out.startswith("# Walrus readme fences\n") and "- cwd: `/home/dev/docs`" in out
    assert "Resume:\n\n```sh\npi --session " in out
    # The tool output holds runs of 3 and 4 backticks: its block is fenced with 5, so it ends where it should.
    block = re.search(r"^(`{5})\n(.*?)\n`{5}$", out, re.S | re.M)
    assert block and "````md\n```js\nwalrus()" in block.group(2)
    assert "<details><summary>[1] thinking: The fences are probably too short.</summary>" in out
    assert "<details><summary>[3] tool bash: cat README.md</summary>" in out
    assert "The inner fence has four backticks" in out  # messages stay Markdown text
    assert show(capsys, "aaaa1111", "--format", "markdown")[1] == out


def test_markdown_export_closes_a_code_block_a_cut_message_left_open(env, capsys):
    w = PiWriter(env, "ffff6666-cut", cwd="/home/dev/cut", start="2026-01-07T10:00:00.000Z")
    w.user("Write the build script.")
    w.assistant("Here it is:\n````sh\nmake\n```\nstill the script")  # the reply was cut mid-block
    w.user("Thanks, now the tests.")
    name(w, "Cut reply").save()
    assert run(capsys, "index")[0] == 0
    out = show(capsys, "ffff6666", "--format", "md")[1]
    assert "still the script\n````\n\n**[2] user**" in out  # the next message is text again, not code
    # A block that is closed stays as it is.
    assert sesame.md_closed("a\n```py\nx\n```\nb") == "a\n```py\nx\n```\nb"


def test_html_export_is_one_self_contained_file_with_untrusted_text_shown_as_text(page_sessions, capsys):
    code, out, err = show(capsys, "bbbb2222", "--format", "html")
    assert code == 0, err
    for bad in HOSTILE:
        assert bad not in out
        assert html_escape(bad) in out
    assert "<script" not in out and "<img" not in out  # no script needed, none let in
    assert "default-src 'none'" in out and not re.search(r"(src|href)=\"?(https?:|//)", out)
    assert "prefers-color-scheme:dark" in out and "@media print" in out
    assert out.count("<details") == 2  # the tool calls, collapsed; their output inside
    assert "^[[31mred.txt^[[0m" in out and "\x1b" not in out  # terminal colours shown as show prints them
    assert '<code id="resume">pi --session ' in out


def html_escape(text):
    import html
    return html.escape(text)


def test_export_honours_around_and_max_chars_as_show_does(page_sessions, capsys):
    out = show(capsys, "aaaa1111", "--format", "md", "--around", "3", "--context", "0")[1]
    assert "[3] tool bash" in out and "Let me look" not in out and "four backticks" not in out
    assert "… 3 chunks (seq 0-2) not shown" in out and "not shown (use --around SEQ)" in out
    whole = show(capsys, "aaaa1111", "--format", "html")[1]
    short = show(capsys, "aaaa1111", "--format", "html", "--max-chars", str(len(whole) - 100))[1]
    assert len(short) < len(whole) - 100 and "not shown (use --around SEQ or a larger --max-chars)" in short


def test_export_output_writes_a_file_and_refuses_to_overwrite_it_without_force(page_sessions, tmp_path, capsys):
    target = tmp_path / "walrus.md"
    code, out, err = show(capsys, "aaaa1111", "--format", "md", "--output", str(target))
    assert code == 0 and out == "" and target.read_text().startswith("# Walrus readme fences")
    target.write_text("my notes")
    code, out, err = show(capsys, "aaaa1111", "--format", "md", "--output", str(target))
    assert code == 1 and "exists; add --force" in err and target.read_text() == "my notes"
    assert show(capsys, "aaaa1111", "--format", "html", "--output", str(target), "--force")[0] == 0
    assert target.read_text().startswith("<!DOCTYPE html>")
    code, _, err = show(capsys, "aaaa1111", "--output", str(target))
    assert code == 2 and "--format" in err


def test_mcp_show_tool_offers_no_export_options():
    assert not set(sesame.option_schema(sesame.COMMANDS["show"])["properties"]) & {"format", "output", "force"}


class PageClient:
    """sesame serve in a thread of the test, and raw HTTP requests to it (any Host, method, cookie)."""

    def __init__(self):
        self.server = sesame.PageServer(0)
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        self.thread.start()
        self.host = "127.0.0.1:%d" % self.server.port
        self.cookie = "%s=%s" % (self.server.cookie, self.server.token)

    def get(self, path, host=None, cookie=None, method="GET"):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        headers = {"Host": host or self.host}
        if cookie is not False:
            headers["Cookie"] = cookie or self.cookie
        c.request(method, path, headers=headers)
        r = c.getresponse()
        body = r.read().decode("utf-8")
        c.close()
        return r, body

    def close(self):
        self.server.httpd.shutdown()
        self.thread.join(10)


@pytest.fixture
def page(page_sessions):
    client = PageClient()
    yield client
    client.close()


def test_serve_answers_only_with_the_token_and_turns_it_into_a_strict_cookie(page):
    assert page.get("/", cookie=False)[0].status == 403
    assert page.get("/api/search?q=walrus", cookie=False)[0].status == 403
    assert page.get("/", cookie="%s=%s" % (page.server.cookie, "x" * 43))[0].status == 403
    assert page.get("/?token=wrong", cookie=False)[0].status == 403
    r, _ = page.get("/?token=%s&q=walrus" % page.server.token, cookie=False)
    assert r.status == 303 and r.getheader("Location") == "/?q=walrus"
    assert r.getheader("Set-Cookie") == "%s=%s; HttpOnly; SameSite=Strict; Path=/" % (page.server.cookie, page.server.token)
    r, body = page.get("/api/search?q=walrus")
    assert r.status == 200 and json.loads(body)["results"][0]["name"] == "Walrus readme fences"


def test_serve_refuses_a_foreign_host_other_methods_and_ids_that_are_paths(page):
    assert page.get("/", host="evil.example:%d" % page.server.port)[0].status == 421  # DNS rebinding
    assert page.get("/", host="localhost:1")[0].status == 421
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
        r, _ = page.get("/api/search?q=walrus", method=method)
        assert r.status == 405 and r.getheader("Allow") == "GET"
    for ref in ("..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "..", "a%5C..%5Cb", "~%2F.ssh", "a%00b"):
        r, body = page.get("/api/session/" + ref)
        assert r.status == 400 and "not a session id" in body
    r, body = page.get("/api/session/ffff9999")
    assert r.status == 404 and "no session matches" in body


def test_serve_page_has_a_strict_policy_no_cors_and_escapes_untrusted_session_text(page):
    r, body = page.get("/")
    csp = r.getheader("Content-Security-Policy")
    nonce = re.search(r"script-src 'nonce-([^']+)'", csp).group(1)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert body.count("<script") == 1 and '<script nonce="%s">' % nonce in body
    r2, _ = page.get("/")
    assert r2.getheader("Content-Security-Policy") != csp  # a new nonce every time
    r, body = page.get("/api/session/bbbb2222")
    assert r.status == 200 and not any(k.lower().startswith("access-control") for k in r.headers)
    fragment = json.loads(body)["html"]
    for bad in HOSTILE:
        assert bad not in fragment and html_escape(bad) in fragment
    r, body = page.get("/api/search?q=pangolin")
    assert json.loads(body)["results"][0]["name"] == "Pangolin " + HOSTILE[0]  # data; the page sets it as text


def test_serve_search_takes_the_cli_filters(page):
    def names(query):
        return [r["name"] for r in json.loads(page.get("/api/search?" + query)[1])["results"]]
    assert names("q=capybara") and names("q=capybara&agent=pi") == []
    assert names("q=capybara&agent=claude") == names("q=capybara")
    assert names("q=walrus&cwd=%2Fhome%2Fdev%2Fdocs") == ["Walrus readme fences"]
    assert names("q=walrus&cwd=%2Fhome%2Fdev%2Fweb") == []
    assert names("q=README&tools=1") == ["Walrus readme fences"]
    r, body = page.get("/api/search?q=walrus&after=someday")
    assert r.status == 400 and json.loads(body)["error"]["message"]


def test_serve_prints_its_url_and_open_hands_the_search_to_the_browser(page_sessions, capsys, monkeypatch):
    import webbrowser
    opened = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    client = sesame.PageServer(0)
    thread = threading.Thread(target=client.serve, args=("nix flake",), daemon=True)
    thread.start()
    try:
        end = time.time() + 10
        while not opened and time.time() < end:
            time.sleep(0.05)
        assert opened == [client.url + "&q=nix%20flake"]
    finally:
        client.httpd.shutdown()
        thread.join(10)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sesame.py"), "serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", first).group(0)
        import urllib.request
        page = urllib.request.build_opener(urllib.request.HTTPCookieProcessor()).open(url + "&q=walrus", timeout=30)
        assert page.status == 200 and page.url.endswith("/?q=walrus") and "<title>Sesame</title>" in page.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_on_a_port_in_use_says_so_in_one_line(page_sessions, capsys):
    import socket
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        code, out, err = run(capsys, "serve", "--port", str(busy.getsockname()[1]))
    finally:
        busy.close()
    assert code == 1 and "cannot serve on 127.0.0.1:" in err and "Traceback" not in err


def test_serve_session_links_a_session_and_its_sub_agents(page):
    parent = json.loads(page.get("/api/session/" + cc_SID)[1])
    assert parent["children"] == [{"sessionId": "agent-a0ad4f", "name": parent["children"][0]["name"]}]
    assert 'href="#session=agent-a0ad4f"' in parent["html"]
    child = json.loads(page.get("/api/session/agent-a0ad4f")[1])
    assert 'href="#session=%s"' % cc_SID in child["html"] and "sub-agent of" in child["html"]


# Real headless Chromium (Debian's package), driven over the DevTools protocol with a minimal
# websocket client: the page as a person uses it.

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(not CHROMIUM, reason="Chromium is not installed (apt-get install chromium; .ci/run does)")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1280,900"]


class DevTools:
    """A Chromium page over the DevTools protocol: JSON messages over a websocket (RFC 6455)."""

    def __init__(self, ws_url):
        import base64
        import socket
        import urllib.parse
        u = urllib.parse.urlsplit(ws_url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (u.path, u.netloc, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.n = 0

    def _read(self, n):
        data = b""
        while len(data) < n:
            more = self.sock.recv(n - len(data))
            assert more, "Chromium closed the DevTools connection"
            data += more
        return data

    def _frame(self):
        b0, b1 = self._read(2)
        size = b1 & 0x7F
        if size == 126:
            size = int.from_bytes(self._read(2), "big")
        elif size == 127:
            size = int.from_bytes(self._read(8), "big")
        return b0 & 0x80, b0 & 0x0F, self._read(size)

    def call(self, method, **params):
        self.n += 1
        payload = json.dumps({"id": self.n, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        size = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big")
                                if size < 65536 else bytes([0x80 | 127]) + size.to_bytes(8, "big"))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:
            message = b""
            while True:
                fin, opcode, data = self._frame()
                message += data
                if fin:
                    break
            reply = json.loads(message)
            if reply.get("id") == self.n:
                assert "error" not in reply, reply
                return reply["result"]

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    def wait(self, expression, seconds=20):
        end = time.time() + seconds
        while time.time() < end:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError("the page never showed: %s" % expression)

    def shows(self, element, text):
        """Wait until `element` (an expression) shows `text` as laid out (innerText). Messages are
        drawn lazily (content-visibility:auto): right after the view is filled, before its first
        frame, their text is not laid out yet, as it is not on screen yet."""
        return self.wait("(%s).innerText.includes(%s)" % (element, json.dumps(text)))

    def key(self, key, code, vk, text=None):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=vk,
                      **({"text": text} if text and kind == "keyDown" else {}))


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium with a new empty profile; yields a DevTools page, then stops it."""
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen([CHROMIUM] + CHROMIUM_FLAGS + ["--user-data-dir=%s" % profile, "--remote-debugging-port=0",
                                                           "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        end = time.time() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            assert time.time() < end and proc.poll() is None, "Chromium did not start"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        import urllib.request
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=30))
        page = DevTools(next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page"))
        yield page
        page.sock.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@needs_chromium
def test_in_chromium_type_a_query_see_ranked_results_open_one_and_expand_a_tool_call(page, browser):
    browser.call("Page.navigate", url=page.server.url)
    browser.wait("document.querySelector('#q') && location.search === ''")  # the token went to a cookie
    browser.wait("document.activeElement.id === 'q'")  # the box has focus on load; "/" brings it back
    browser.eval("document.activeElement.blur()")
    assert browser.eval("document.activeElement.id") != "q"
    browser.key("/", "Slash", 191, "/")
    assert browser.eval("document.activeElement.id") == "q" and browser.eval("document.querySelector('#q').value") == ""
    browser.call("Input.insertText", text="walrus fences")
    first = browser.wait("document.querySelector('#results li .name') && document.querySelector('#results li .name').textContent")
    assert first == "Walrus readme fences"
    assert browser.eval("location.search") == "?q=walrus+fences"
    assert browser.eval("document.querySelector('#results li mark').textContent.toLowerCase()") in ("walrus", "fences")
    browser.key("Enter", "Enter", 13, "\r")
    browser.wait("document.querySelector('#view h1') && document.querySelector('#view h1').textContent === 'Walrus readme fences'")
    assert "#session=aaaa1111" in browser.eval("location.hash")
    tool = "document.querySelector('#view details.chunk.tool')"
    assert browser.eval(tool + ".open") is False
    browser.eval(tool + ".querySelector('summary').click()")
    assert browser.eval(tool + ".open") is True
    browser.shows(tool, "walrus()")
    # The same address opens the same search and session again (a reload, a link).
    browser.call("Page.reload")
    browser.wait("document.querySelector('#view h1') && document.querySelector('#results li') && true")
    assert browser.eval("document.querySelector('#q').value") == "walrus fences"
    # Arrows and Enter open the second result; a sub-agent links to its parent and back.
    browser.eval("document.querySelector('#q').focus(); document.querySelector('#q').select()")
    browser.call("Input.insertText", text="capybara TODO")
    browser.wait("document.querySelectorAll('#results li').length === 2")
    second = browser.eval("document.querySelectorAll('#results li .name')[1].textContent")
    browser.key("ArrowDown", "ArrowDown", 40)
    browser.key("Enter", "Enter", 13, "\r")
    browser.wait("document.querySelector('#view h1') && document.querySelector('#view h1').textContent === %s" % json.dumps(second))
    other = "agent-a0ad4f" if "session=" + cc_SID[:8] in browser.eval("location.hash") else cc_SID
    browser.eval("document.querySelector('#view .subs a').click()")
    browser.wait("location.hash.startsWith('#session=%s')" % other)
    browser.wait("document.querySelector('#view .subs a') && document.querySelector('#view code#resume') !== undefined")


@needs_chromium
def test_in_chromium_hostile_session_text_stays_text_and_runs_nothing(page, browser):
    browser.call("Page.addScriptToEvaluateOnNewDocument", source="window.alert = n => { window.alerted = n; };")
    browser.call("Page.navigate", url=page.server.url + "&q=pangolin")
    browser.wait("document.querySelector('#results li .name') && true")
    assert browser.eval("document.querySelector('#results li .name').textContent") == "Pangolin " + HOSTILE[0]
    browser.key("Enter", "Enter", 13, "\r")
    browser.wait("document.querySelector('#view h1') && true")
    assert browser.eval("document.querySelectorAll('#view img, #view script').length") == 0
    browser.shows("document.querySelector('#view')", HOSTILE[1])
    browser.eval("document.querySelector('#view details.chunk.tool summary').click()")
    browser.shows("document.querySelector('#view details.chunk.tool')", HOSTILE[0])
    assert browser.eval("typeof window.alerted") == "undefined"  # neither alert(1) nor alert(2) ran


@needs_chromium
def test_in_chromium_a_5000_message_session_opens_at_the_matching_message(env, capsys, browser):
    w = PiWriter(env, "eeee5555-huge", cwd="/home/dev/huge", start="2026-04-01T10:00:00.000Z")
    for i in range(1667):  # a tool call and its result are one chunk: 5,002 chunks
        w.user("Step %d of the migration: %s" % (i, "rename the tables " * 8))
        w.tool("bash", {"command": "psql -c 'select %d'" % i}, "row %d\n" % i * 20)
        w.assistant("Done with step %d." % i)
    w.user("Finally the okapi index is rebuilt.")
    name(w, "Huge migration").save()
    assert run(capsys, "index")[0] == 0
    client = PageClient()
    try:
        browser.call("Page.navigate", url=client.server.url + "&q=okapi")
        browser.wait("document.querySelector('#results li') && true")
        browser.key("Enter", "Enter", 13, "\r")
        browser.wait("document.querySelector('#view .chunk.hit') && true", seconds=60)
        assert browser.eval("document.querySelectorAll('#view .chunk').length") == 3 * 1667 + 1
        browser.shows("document.querySelector('#view .chunk.hit')", "Finally the okapi index is rebuilt.")
        assert browser.eval("document.querySelectorAll('#view details[open]').length") == 0
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# Setup: wiring Sesame into agents. Every agent in a temporary HOME: apply, apply again (nothing
# changes), undo (the file back byte for byte); a config with comments and odd formatting, one that
# does not parse, a read-only one. Then the agents' own CLIs, where installed.
# ---------------------------------------------------------------------------------------------

# A user's config in each format, with comments, odd spacing, key order and (JSONC) a trailing comma.
USER_CONFIGS = {
    "json": '{\n\t// my settings, keep me\n\t"theme":"dark" ,   /* inline */\n\t"zeta": [1,2,],\n\t"alpha": {"b": 1},\n}\n',
    "toml": '# top comment\nmodel="o3"   # why o3\n\n[profiles.fast]\nmodel = "x"  # fast\n',
    "yaml": '# my agent\nGOOSE_MODEL: x   # keep\nextensions:\n    dev:\n        cmd: foo\n        enabled: true\nmcp_servers:\n    other:\n        command: bar\nlast: 1\n',
}
BROKEN_CONFIGS = {"json": '{\n  "theme": "dark"\n  "oops": 1\n}\n', "toml": 'model = "o3\n[x\n', "yaml": "extensions:\n\tdev: 1\n"}


@pytest.fixture
def setup_env(tmp_path, monkeypatch):
    """A fresh HOME with no agent CLI on PATH (setup edits the files itself); returns the env."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME", "PI_CODING_AGENT_DIR",
                "KIMI_CODE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SESAME_CONFIG_DIR", str(tmp_path / "config"))
    return os.environ


def tree_bytes(root):
    """Every file under root with its bytes (and every folder), to compare a HOME before and after."""
    out = {}
    for folder, dirs, files in os.walk(str(root)):
        out[os.path.relpath(folder, str(root)) + "/"] = None
        for f in files:
            with open(os.path.join(folder, f), "rb") as fh:
                out[os.path.relpath(os.path.join(folder, f), str(root))] = fh.read()
    return out


def make_found(agent, env, config=None):
    """The agent's folder (so setup finds it) and, given, its config file."""
    folder = agent.folder(env)
    if agent.id == "aider":
        config = config or "model: x\n"
    else:
        os.makedirs(folder, exist_ok=True)
    if config is not None and agent.config:
        os.makedirs(os.path.dirname(agent.config(env)), exist_ok=True)
        with open(agent.config(env), "w") as f:
            f.write(config)


MCP_AGENTS = [a.id for a in sesame.SETUP_AGENTS if a.fmt]
SKILL_AGENTS = [a.id for a in sesame.SETUP_AGENTS if a.skills]


@pytest.mark.parametrize("agent_id", [a.id for a in sesame.SETUP_AGENTS if a.fmt or a.skills])
def test_setup_adds_then_changes_nothing_then_undo_puts_every_byte_back(agent_id, setup_env, tmp_path, capsys):
    agent = sesame.SETUP_BY_ID[agent_id]
    make_found(agent, setup_env, USER_CONFIGS[agent.fmt] if agent.fmt else None)
    before = tree_bytes(tmp_path / "home")
    code, out, err = run(capsys, "setup", agent_id)
    assert code == 0, out + err
    command = sesame.sesame_command()
    if agent.fmt:
        with open(agent.config(setup_env)) as f:
            text = f.read()
        assert sesame._command_of_entry(sesame._entry_get(agent, text)) == command
        # the user's lines are all still there, in order: only lines were added (and a comma)
        old = USER_CONFIGS[agent.fmt].splitlines()
        new = [l.rstrip(",") for l in text.splitlines()]
        it = iter(new)
        assert all(any(l.rstrip(",") == n for n in it) for l in old), text
    if agent.skills:
        with open(os.path.join(agent.skills(setup_env), "sesame", "SKILL.md")) as f:
            assert f.read() == open(os.path.join(HERE, "SKILL.md")).read()
    applied = tree_bytes(tmp_path / "home")
    code, out, err = run(capsys, "setup", agent_id)
    assert code == 0 and "already there" in out and "added" not in out, out
    assert tree_bytes(tmp_path / "home") == applied
    code, out, err = run(capsys, "status")
    assert re.search(r"(?m)^  %s +%s" % (agent_id, "MCP: yes" if agent.fmt else "no MCP, skill: yes"), out), out
    code, out, err = run(capsys, "setup", "--undo", agent_id)
    assert code == 0, out + err
    assert tree_bytes(tmp_path / "home") == before  # no backup, no folder Sesame made, left behind
    code, out, err = run(capsys, "setup", "--undo", agent_id)
    assert code == 0 and "nothing was added" in out


@pytest.mark.parametrize("fmt", ["json", "toml", "yaml"])
def test_setup_refuses_a_config_it_cannot_parse_and_leaves_it_untouched(fmt, setup_env, tmp_path, capsys):
    if fmt == "toml" and sys.version_info < (3, 11):
        pytest.skip("TOML is checked with tomllib (Python 3.11+)")
    agent = next(a for a in sesame.SETUP_AGENTS if a.fmt == fmt)
    make_found(agent, setup_env, BROKEN_CONFIGS[fmt])
    before = tree_bytes(tmp_path / "home")
    code, out, err = run(capsys, "setup", agent.id)
    assert code == 1 and "cannot be parsed" in out and agent.config(setup_env) in out, out
    assert one_line_error(err) and "cannot be parsed" in err, err
    assert tree_bytes(tmp_path / "home") == before
    assert not os.path.exists(sesame.setup_record_path(setup_env)) or sesame.load_setup_record(setup_env) == {}


def test_setup_read_only_config_is_a_clear_error_with_nothing_half_written(setup_env, tmp_path, capsys):
    agent = sesame.SETUP_BY_ID["gemini"]
    make_found(agent, setup_env, USER_CONFIGS["json"])
    os.chmod(agent.config(setup_env), 0o444)
    before = tree_bytes(tmp_path / "home")
    code, out, err = run(capsys, "setup", "gemini")
    assert code == 1 and "read-only; nothing was changed" in out and one_line_error(err), out + err
    assert tree_bytes(tmp_path / "home") == before  # no temporary file, no backup, no skill
    os.chmod(agent.config(setup_env), 0o644)
    os.chmod(os.path.dirname(agent.config(setup_env)), 0o555)  # the file writable, its folder not
    try:
        code, out, err = run(capsys, "setup", "gemini")
        assert code == 1 and "read-only; nothing was changed" in out, out + err
        assert err and all(one_line_error(l + "\n") for l in err.splitlines()), err  # the MCP entry, the skill
        assert tree_bytes(tmp_path / "home") == before
    finally:
        os.chmod(os.path.dirname(agent.config(setup_env)), 0o755)


def test_setup_leaves_a_sesame_entry_that_runs_something_else_unless_forced(setup_env, tmp_path, capsys):
    agent = sesame.SETUP_BY_ID["cursor"]
    mine = '{"mcpServers": {"sesame": {"command": "/opt/old/sesame", "args": ["mcp"]}}}\n'
    make_found(agent, setup_env, mine)
    code, out, err = run(capsys, "setup", "cursor")
    assert code == 0 and "left alone" in out and "/opt/old/sesame mcp" in out, out
    assert open(agent.config(setup_env)).read() == mine
    code, out, _ = run(capsys, "status")
    assert "a 'sesame' entry runs something else" in out
    code, out, err = run(capsys, "setup", "cursor", "--force")
    assert code == 0 and "replaced" in out, out
    assert json.load(open(agent.config(setup_env)))["mcpServers"]["sesame"]["command"] == sesame.sesame_command()[0]
    assert open(agent.config(setup_env) + ".sesame-backup").read() == mine
    code, out, err = run(capsys, "setup", "--undo", "cursor")
    assert open(agent.config(setup_env)).read() == mine and not os.path.exists(agent.config(setup_env) + ".sesame-backup")


def test_setup_updates_what_it_added_earlier_and_undo_still_goes_back_to_before(setup_env, tmp_path, capsys,
                                                                                 monkeypatch):
    agent = sesame.SETUP_BY_ID["gemini"]
    make_found(agent, setup_env, USER_CONFIGS["json"])
    before = tree_bytes(tmp_path / "home")
    with monkeypatch.context() as m:  # an older Sesame, elsewhere, with an older SKILL.md
        old_skill = tmp_path / "old" / "SKILL.md"
        old_skill.parent.mkdir()
        old_skill.write_text("---\nname: sesame\ndescription: old\n---\n")
        m.setattr(sesame, "sesame_command", lambda: ("/opt/old/sesame", ["mcp"]))
        m.setattr(sesame, "_skill_source", lambda: str(old_skill))
        assert run(capsys, "setup", "gemini")[0] == 0
    code, out, err = run(capsys, "setup", "gemini")
    assert code == 0 and out.count("replaced") == 2 and "left alone" not in out, out
    assert open(agent.config(setup_env) + ".sesame-backup").read() == USER_CONFIGS["json"]  # still the user's own
    run(capsys, "setup", "--undo", "gemini")
    assert tree_bytes(tmp_path / "home") == before


def test_setup_undo_after_the_user_edited_the_file_removes_only_the_entry(setup_env, tmp_path, capsys):
    agent = sesame.SETUP_BY_ID["codex"]
    make_found(agent, setup_env, USER_CONFIGS["toml"])
    run(capsys, "setup", "codex")
    with open(agent.config(setup_env), "a") as f:
        f.write('\n[mcp_servers.other]\ncommand = "x"\n')
    code, out, err = run(capsys, "setup", "--undo", "codex")
    assert code == 0 and "the rest is kept" in out, out
    assert open(agent.config(setup_env)).read() == USER_CONFIGS["toml"] + '\n[mcp_servers.other]\ncommand = "x"\n'


def test_setup_undo_leaves_an_entry_the_user_changed_since(setup_env, tmp_path, capsys):
    agent = sesame.SETUP_BY_ID["crush"]
    make_found(agent, setup_env)
    run(capsys, "setup", "crush")
    text = open(agent.config(setup_env)).read().replace(sesame.sesame_command()[0], "/usr/local/bin/sesame")
    open(agent.config(setup_env), "w").write(text)
    code, out, err = run(capsys, "setup", "--undo", "crush")
    assert "changed since; left alone" in out and open(agent.config(setup_env)).read() == text


def test_setup_lists_only_agents_found_and_dry_run_changes_nothing(setup_env, tmp_path, capsys):
    make_found(sesame.SETUP_BY_ID["codex"], setup_env, USER_CONFIGS["toml"])
    make_found(sesame.SETUP_BY_ID["aider"], setup_env)
    before = tree_bytes(tmp_path / "home")
    code, out, err = run(capsys, "setup")
    assert code == 0 and "Codex (codex)" in out and "would add" in out and "Claude" not in out, out
    assert "Aider has no MCP support" in out and "read: " in out
    code, out, err = run(capsys, "setup", "--dry-run", "--all")
    assert code == 0 and "+[mcp_servers.sesame]" in out and " model = \"x\"  # fast" in out, out
    code, out, err = run(capsys, "setup", "--json")
    data = json.loads(out)
    assert [a["agent"] for a in data["agents"]] == ["codex", "aider"] and data["applied"] is False
    assert tree_bytes(tmp_path / "home") == before and not os.path.exists(tmp_path / "data" / "setup.json")
    code, out, err = run(capsys, "setup", "cdex")
    assert code == 2 and "did you mean 'codex'" in err


def test_setup_falls_back_to_editing_the_file_when_the_agents_command_fails(setup_env, tmp_path, capsys):
    fake = tmp_path / "bin" / "codex"
    fake.write_text("#!/bin/sh\necho 'codex: something broke' >&2\nexit 3\n")
    fake.chmod(0o755)
    agent = sesame.SETUP_BY_ID["codex"]
    make_found(agent, setup_env, USER_CONFIGS["toml"])
    code, out, err = run(capsys, "setup", "codex")
    assert code == 0 and "exited with 3: codex: something broke" in out and "the file was edited" in out, out
    assert sesame._command_of_entry(sesame.toml_get(open(agent.config(setup_env)).read(), ("mcp_servers", "sesame"))) \
        == sesame.sesame_command()
    run(capsys, "setup", "--undo", "codex")
    assert open(agent.config(setup_env)).read() == USER_CONFIGS["toml"]


def test_setup_without_skill_md_beside_sesame_still_adds_the_mcp_server(setup_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sesame, "_skill_source", lambda: None)  # installed as ~/.local/bin/sesame alone
    agent = sesame.SETUP_BY_ID["claude"]
    make_found(agent, setup_env)
    code, out, err = run(capsys, "setup", "claude")
    assert code == 0 and "no SKILL.md beside" in out, out
    assert json.load(open(agent.config(setup_env)))["mcpServers"]["sesame"]["args"] == sesame.sesame_command()[1]
    assert not os.path.exists(os.path.join(agent.skills(setup_env), "sesame"))


@pytest.mark.parametrize("text", [
    '{}', '{"a": 1}', '{\n  "a": 1\n}\n', '{\n  "a": 1, // why\n}\n', '{\n  "a": 1 /* c */ }',
    '{\n    "mcpServers": {\n        "x": {}\n    }\n}', '{\n  "a": 1 /* one\n  two */\n}\n', '{\n\t"mcpServers": {},\n\t"b": [1, {"c": 2}]\n}\n',
])
def test_jsonc_editor_adds_one_member_and_removes_it_to_the_same_bytes(text):
    keys = ("mcpServers", "sesame")
    after, created = sesame.jsonc_set(text, keys, {"command": "/x", "args": ["mcp"]})
    assert sesame.jsonc_get(after, keys) == {"command": "/x", "args": ["mcp"]}
    assert sesame.jsonc_remove(after, keys, created) == text


def test_toml_and_yaml_editors_remove_what_they_added_to_the_same_bytes():
    for text in ("", 'a = 1\n', USER_CONFIGS["toml"], '[mcp_servers.x]\ncommand = "y"\n\n[z]\nb = 2\n'):
        after, created = sesame.toml_set(text, ("mcp_servers", "sesame"), {"command": "/x", "args": ["mcp"]})
        assert sesame.toml_get(after, ("mcp_servers", "sesame")) == {"command": "/x", "args": ["mcp"]}
        assert sesame.toml_remove(after, ("mcp_servers", "sesame"), created) == text
    for text in ("", "a: 1\n", USER_CONFIGS["yaml"]):
        after, created = sesame.yaml_set(text, ("mcp_servers",), "sesame", {"command": "/x", "args": ["mcp"]})
        assert sesame.yaml_get(after, ("mcp_servers",), "sesame") == {"command": "/x", "args": ["mcp"]}
        assert sesame.yaml_remove(after, ("mcp_servers",), "sesame", created) == text
    if sys.version_info >= (3, 11):  # checked with tomllib: never a file TOML refuses
        with pytest.raises(ValueError, match="inline table"):
            sesame.toml_set('mcp_servers = { x = { command = "y" } }\n', ("mcp_servers", "sesame"), {"command": "/x"})
    # an empty table written inline (`mcp_servers: {}`) is opened for the entry, not refused
    after, _ = sesame.yaml_set("a: 1\nmcp_servers: {}  # none yet\nb: 2\n", ("mcp_servers",), "sesame", {"command": "/x"})
    assert after == 'a: 1\nmcp_servers:  # none yet\n  sesame:\n    command: "/x"\nb: 2\n'
    assert sesame.yaml_get(after, ("mcp_servers",), "sesame") == {"command": "/x"}


# The agents' own CLIs (npm: @anthropic-ai/claude-code, @openai/codex, @google/gemini-cli,
# @qwen-code/qwen-code, opencode-ai; .ci/run installs them), run offline: their `mcp list` only
# reads the config and starts the server for a health check. OpenCode has no command that adds a
# server without asking: setup edits its file, and `opencode mcp list` checks the edit.
AGENT_CLIS = {"claude": "claude", "codex": "codex", "gemini": "gemini", "qwen": "qwen", "opencode": "opencode"}


def cli_env(home, bin_dir):
    return {"HOME": str(home), "PATH": os.pathsep.join([bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8", "SESAME_DATA_DIR": str(home) + "-sesame-data", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1",
            "GEMINI_CLI_TRUST_WORKSPACE": "true", "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}


def mcp_list(agent_id, env):
    p = subprocess.run([AGENT_CLIS[agent_id], "mcp", "list"], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180, cwd=env["HOME"])
    return re.sub(r"\x1b\[[0-9;]*m", "", p.stdout.decode("utf-8", "replace"))  # without colour codes


def test_setup_all_then_each_agents_own_mcp_list_shows_sesame_and_undo_all_restores_every_file(tmp_path):
    installed = [a for a, exe in AGENT_CLIS.items() if shutil.which(exe)]
    if len(installed) < 3:
        pytest.skip("needs three of the agent CLIs on PATH (npm i -g @anthropic-ai/claude-code @openai/codex "
                    "@google/gemini-cli @qwen-code/qwen-code); found: %s" % (", ".join(installed) or "none"))
    home = tmp_path / "home"
    bin_dir = os.path.dirname(shutil.which(AGENT_CLIS[installed[0]]))
    env = cli_env(home, bin_dir)
    # three or four agents configured, each with a file of the user's
    configs = {"codex": ".codex/config.toml", "gemini": ".gemini/settings.json", "qwen": ".qwen/settings.json",
               "claude": ".claude/settings.json", "opencode": ".config/opencode/opencode.json"}
    contents = {"codex": '# mine\nmodel = "o3"\n', "gemini": '{\n  // mine\n  "ui": {"theme": "x"}\n}\n',
                "qwen": '{\n  "general": {"vimMode": false}\n}\n', "claude": '{\n  "theme": "dark"\n}\n',
                "opencode": '{\n  // mine\n  "$schema": "https://opencode.ai/config.json"\n}\n'}
    for agent_id in installed:
        os.makedirs(os.path.dirname(str(home / configs[agent_id])), exist_ok=True)
        (home / configs[agent_id]).write_text(contents[agent_id])
    before = tree_bytes(home)
    p = subprocess.run([sys.executable, SESAME, "setup", "--all", "--json"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600)
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    wired = {a["agent"]: a["changes"][0] for a in result["agents"]}
    for agent_id in installed:
        via = "cli" if sesame.SETUP_BY_ID[agent_id].cli else "file"
        assert wired[agent_id]["state"] == "added" and wired[agent_id]["via"] == via, wired[agent_id]
        # the agent's own list, in a copy of the HOME (its runs write their own state files there)
        copy = tmp_path / ("run-" + agent_id)
        shutil.copytree(str(home), str(copy), symlinks=True)
        listed = mcp_list(agent_id, cli_env(copy, bin_dir))
        assert re.search(r"(?m)^\W*sesame\b", listed) and sesame.sesame_command()[0] in listed, listed
    p = subprocess.run([sys.executable, SESAME, "setup", "--undo", "--all"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600)
    assert p.returncode == 0, p.stderr
    after = tree_bytes(home)
    # every file that was there is as it was, and nothing Sesame wrote is left; the agents' commands
    # leave files of their own (Claude Code a backup in ~/.claude/backups, Gemini CLI its project
    # registry, Qwen Code settings.json.orig after migrating the file), which are theirs to keep
    assert {k: after.get(k) for k in before if after.get(k) != before[k]} == {}, p.stdout
    new = set(after) - set(before)
    assert not [k for k in new if "sesame" in k or "/skills" in k], new


class _SearchingModel:
    """A mock Anthropic Messages server (127.0.0.1) for Claude Code: to a prompt it answers with one
    call of Sesame's MCP search tool (the word after "sesame-query=" in the prompt); once the tool's result
    is back, it answers with that result's text. Claude Code streams, so replies are SSE.

    Claude Code 2.1.2xx-3xx defers MCP tools: the request names them in a system message and offers
    ToolSearch, which the model calls ("select:<name>") to load one before calling it, as a real
    model does. `offered` says how the search tool came: "listed" with the tools or "deferred"."""

    def __init__(self):
        import http.server
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.split("?")[0].endswith("/messages"):
                    data = json.dumps({"input_tokens": 10}).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                tools = [t.get("name") for t in body.get("tools") or []]
                last = body["messages"][-1]["content"]
                results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(last, list) else []
                query = re.search(r"sesame-query=(\w+)", json.dumps(body["messages"]))
                search = {"type": "tool_use", "id": "toolu_1", "name": "mcp__sesame__search",
                          "input": {"query": query.group(1) if query else ""}}
                if results and results[-1].get("tool_use_id") == "toolu_0":  # the search tool is loaded
                    block = search
                elif results:
                    content = results[-1]["content"]
                    text = content if isinstance(content, str) else "".join(c.get("text", "") for c in content
                                                                            if isinstance(c, dict))
                    block = {"type": "text", "text": "FOUND: " + text}
                elif "mcp__sesame__search" in tools and query:
                    model.offered = "listed"
                    block = search
                elif "ToolSearch" in tools and query and "mcp__sesame__search" in json.dumps(body.get("messages")):
                    model.offered = "deferred"
                    block = {"type": "tool_use", "id": "toolu_0", "name": "ToolSearch",
                             "input": {"query": "select:mcp__sesame__search"}}
                else:
                    block = {"type": "text", "text": "mock title"}
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

                def event(name, obj):
                    self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(obj))).encode())
                usage = {"input_tokens": 10, "output_tokens": 1}
                # (a message id of its own: Claude Code merges the streamed fragments of one id)
                event("message_start", {"type": "message_start", "message": {"id": "msg_%d" % next(model.ids), "type": "message",
                      "role": "assistant", "model": body.get("model"), "content": [], "stop_reason": None, "usage": usage}})
                if block["type"] == "text":
                    event("content_block_start", {"type": "content_block_start", "index": 0,
                                                  "content_block": {"type": "text", "text": ""}})
                    event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": block["text"]}})
                else:
                    event("content_block_start", {"type": "content_block_start", "index": 0, "content_block":
                                                  {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                    event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta":
                                                  {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
                event("content_block_stop", {"type": "content_block_stop", "index": 0})
                event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use" if block["type"]
                                        == "tool_use" else "end_turn"}, "usage": {"output_tokens": 5}})
                event("message_stop", {"type": "message_stop"})

        self.offered, self.ids = None, itertools.count(1)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_claude_code_after_setup_calls_sesames_search_tool_and_gets_the_session(tmp_path):
    exe = shutil.which("claude")
    if not exe:
        pytest.skip("Claude Code is not installed (npm i -g @anthropic-ai/claude-code; .ci/run installs it)")
    home = tmp_path / "home"
    PiWriter(home / ".pi" / "agent" / "sessions", "e2e-1", cwd="/home/dev/shop").user(
        "the zanzibarquux cache keeps stale prices").assistant("Flush it on deploy.").save()
    os.makedirs(str(home / ".claude"))
    env = cli_env(home, os.path.dirname(exe))
    p = subprocess.run([sys.executable, SESAME, "setup", "claude"], env=env, stdout=subprocess.PIPE, timeout=300)
    assert p.returncode == 0 and b"added" in p.stdout, p.stdout
    model = _SearchingModel()
    try:
        env.update(ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="x")
        p = subprocess.run([exe, "-p", "which old session was it? sesame-query=zanzibarquux", "--allowedTools", "mcp__sesame__search"],
                           env=env, cwd=str(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
    finally:
        model.server.shutdown()
    out = p.stdout.decode("utf-8", "replace")
    assert model.offered, p.stderr   # the tool reached the model, listed or deferred
    assert "FOUND:" in out and "e2e-1" in out, out + p.stderr.decode("utf-8", "replace")


@pytest.mark.parametrize("agent_id", list(AGENT_CLIS))
def test_setup_through_the_agents_own_command_is_what_its_mcp_list_shows(agent_id, tmp_path):
    exe = shutil.which(AGENT_CLIS[agent_id])
    if not exe:
        pytest.skip("%s is not installed (npm i -g; .ci/run installs it)" % AGENT_CLIS[agent_id])
    home = tmp_path / "home"
    home.mkdir()
    env = cli_env(home, os.path.dirname(exe))
    p = subprocess.run([sys.executable, SESAME, "setup", agent_id], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0 and b"added" in p.stdout and b"(with `" not in p.stderr, p.stdout + p.stderr
    listed = mcp_list(agent_id, env)
    assert re.search(r"(?m)^\W*sesame\b", listed) and sesame.sesame_command()[0] in listed, listed
    p = subprocess.run([sys.executable, SESAME, "setup", agent_id], env=env, stdout=subprocess.PIPE, timeout=300)
    assert b"already there" in p.stdout and b"added" not in p.stdout


# ==================================================================================================
# Commands and CLI: the command line, exit codes, JSON errors, status
# ==================================================================================================

@pytest.mark.parametrize("argv,code,kind", [
    (["search", "x", "--bogus"], 2, "usage"),
    (["search", "***"], 2, "usage"),
    (["search", "x", "--after", "someday"], 2, "usage"),
    (["search", "x", "--agent", "nosuch"], 2, "usage"),
    (["search", "x", "--limit", "0"], 2, "usage"),
])
def test_failures_in_json_mode_print_an_error_object(corpus, capsys, argv, code, kind):
    rc, out, err = run(capsys, *argv, "--json")
    error = json.loads(out)["error"]
    assert rc == code and list(error) == ["code", "message", "hint"] and error["code"] == kind
    assert err.startswith("sesame: " + error["message"]) and err.count("\n") == 1


def test_config_and_index_failures_in_json_mode(corpus, capsys, tmp_path):
    import sqlite3 as sq
    db = str(tmp_path / "data" / "index.sqlite")
    con = sq.connect(db)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    rc, out, err = run(capsys, "search", "x", "--json")
    assert rc == 1 and json.loads(out)["error"]["code"] == "index" and json.loads(out)["error"]["hint"]
    write_config(None, tmp_path, text="{oops")
    rc, out, err = run(capsys, "status", "--json")
    assert rc == 1 and json.loads(out)["error"]["code"] == "config" and "line 1" in json.loads(out)["error"]["message"]


def test_status_reports_counts_sources_and_freshness(corpus, capsys):
    code, out, _ = run(capsys, "status", "--json")
    info = json.loads(out)
    assert info["sessions"] == 10 and info["perAgent"][0]["agent"] == "pi"
    assert info["changedSinceLastIndex"] == 0 and info["lastIndex"]
    PiWriter(corpus, "new-one").user("fresh").save()
    assert json.loads(run(capsys, "status", "--json")[1])["changedSinceLastIndex"] == 1
    assert "sqlite:" in run(capsys, "status")[1]


def test_status_reports_claude_and_codex_records_of_unknown_types_with_the_versions_that_wrote_them(env, tmp_path, capsys):
    folder = tmp_path / "agents"
    write_config({"sources": [{"parser": "claude", "path": ct_write("claude", folder, "hologram_beam")},
                              {"parser": "codex", "path": ct_write("codex", folder, "hologram_beam")}]}, tmp_path)
    run(capsys, "index")
    per_agent = {p["agent"]: p for p in json.loads(run(capsys, "status", "--json")[1])["perAgent"]}
    assert per_agent["claude"]["unrecognizedRecords"] == {"hologram_beam": 1}
    assert per_agent["claude"]["versionsSeen"] == ["2.1.14"] and per_agent["codex"]["versionsSeen"] == ["0.169.0"]
    assert per_agent["codex"]["unrecognizedRecords"] == {"hologram_beam": 1}
    assert "claude: 1 record of 1 unknown type (hologram_beam)" in run(capsys, "status")[1]


def test_status_text_counts_in_the_singular_and_aligns_long_agent_names():
    info = {"indexPath": "/i", "indexExists": True, "indexBytes": 1e6, "sessions": 3, "chunks": 9, "files": 2,
            "perAgent": [{"agent": "antigravity", "sessions": 1, "chunks": 1, "deletedKept": 0,
                          "unrecognizedRecords": {"custom_block": 1}},
                         {"agent": "pi", "sessions": 2, "chunks": 8, "deletedKept": 0}],
            "lastIndex": "2026-01-01T00:00:00Z", "changedSinceLastIndex": 0, "notIndexed": [], "configPath": "/c",
            "configFound": True, "sources": [], "schemaVersion": 1, "sesameVersion": "x", "sqliteVersion": "3"}
    lines = sesame.status_text(info).splitlines()
    assert "antigravity      1 session          1 chunk" in lines[2] and "pi               2 sessions         8 chunks" in lines[3]
    assert "antigravity: 1 record of 1 unknown type (custom_block)" in sesame.status_text(info)


@pytest.mark.parametrize("argv", [
    ["search", "foo"], ["search", "foo", "bar", "--json"], ["search", "--limit", "5", "x"], ["search", "--limit=5", "x", "-draft"],
    ["search", "x", "--tool", "bash", "--tool=edit", "--cwd", "/tmp", "--after", "7d", "--no-refresh"],
    ["search", "--", "--json", "x"], ["search", "-x", "y"], ["search", "a=b", "c"], ["search"],
    ["search", "x", "--max-chars", "0", "--fields", "minimal", "--offset", "3", "--tools", "--path", "src/",
     "--agent", "pi", "--before", "2w", "--limit", "3", "--limit", "4"],
])
def test_a_plain_search_command_line_is_read_without_argparse_and_as_argparse_reads_it(argv):
    """quick_args spares a search argparse's import and parser (~2 ms of every search): for the
    command lines it takes, it must give exactly what argparse gives."""
    quick = sesame.quick_args(argv)
    parser = sesame.build_parser("search")
    assert quick is not None and vars(quick) == vars(parser.parse_args(sesame._search_argv(argv, parser)))


@pytest.mark.parametrize("argv", [["search", "x", "--lim", "5"], ["search", "x", "--json=1"], ["search", "x", "--limit", "five"],
                                  ["search", "-h"], ["search", "x", "--cwd"], ["search", "x", "--limit", "-5"],
                                  ["search", "--version"], ["--version"], ["show", "abc"], ["status", "--json"]])
def test_every_other_command_line_goes_to_argparse(argv):
    assert sesame.quick_args(argv) is None


def test_usage_errors_exit_2_with_one_line(capsys):
    code, out, err = run(capsys, "search")
    assert code == 2 and err.count("\n") == 1
    code, out, err = run(capsys, "bogus-command")
    assert code == 2
    code, out, err = run(capsys, "search", "x", "--limt", "3")
    assert code == 2 and "did you mean --limit?" in err
    # an option of sesame itself after the command: where it goes, not "did you mean --version?"
    code, out, err = run(capsys, "search", "--version")
    assert code == 2 and "did you mean" not in err and "goes before the command (sesame --version)" in err
    # every command, a required argument missing or an option misspelt (`show` without a session
    # printed a traceback: its --format's choices were taken for a subcommand's parsers)
    code, out, err = run(capsys, "show")
    assert code == 2 and err.count("\n") == 1 and "required: session" in err, err
    for name in sesame.COMMANDS:
        code, out, err = run(capsys, name, "--formt", "x")
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (name, err)


# ==================================================================================================
# Reliability: bad input, faults of the index, concurrency. Long kill -9 trials are opt-in:
# SESAME_FAULT_TRIALS=20 python3 -m pytest -q -k kill_9
# ==================================================================================================

SESAME = os.path.join(HERE, "sesame.py")
GEN_CORPUS = os.path.join(HERE, "..", "shared", "bench", "gen_corpus.py")


# -------------------------------------------------------------------------------------------------
# Helpers of the reliability tests
# -------------------------------------------------------------------------------------------------


def index_json(capsys, *extra):
    code, out, err = run(capsys, "index", "--json", *extra)
    assert code == 0, err
    assert "Traceback" not in err
    return json.loads(out)


def skipped_reasons(summary):
    return {os.path.basename(p["path"]): p["reason"] for p in summary["skipped"]}


def good_session(root, sid="good-1", word="pangolin"):
    w = PiWriter(root, sid, start="2026-03-11T09:00:00.000Z")
    w.user("the %s migration plan" % word).assistant("done with the %s work" % word)
    return w.save()


def one_line_error(err):
    return err.count("\n") == 1 and err.startswith("sesame: ") and "Traceback" not in err


# -------------------------------------------------------------------------------------------------
# Bad input: lines, files, folders
# -------------------------------------------------------------------------------------------------

def test_a_file_name_that_is_not_utf8_is_indexed_shown_and_printed_safely(env, capsys):
    good_session(env)
    folder = os.path.join(str(env), "--home-dev-odd--").encode()
    os.makedirs(folder)
    w = PiWriter(env, "odd-name", cwd="/home/dev/odd")
    w.user("the marmoset file name test").assistant("ok")
    with open(os.path.join(folder, b"odd_\xff\xfe.jsonl"), "w") as f:
        f.writelines(line(e) for e in w.lines)
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and json.loads(out)["filesSkipped"] == 0, err
    code, out, err = run(capsys, "search", "marmoset", "--json")
    (r,) = json.loads(out)["results"]
    assert r["sessionId"] == "odd-name" and r["path"].endswith("odd_\\xff\\xfe.jsonl")
    code, out, err = run(capsys, "search", "marmoset")
    assert code == 0 and "marmoset" in out
    code, out, err = run(capsys, "show", "odd-name")
    assert code == 0 and "odd_\\xff\\xfe.jsonl" in out
    # A second run sees the same file unchanged (the stored name is the real one, byte for byte).
    assert json.loads(run(capsys, "index", "--json")[1])["filesIndexed"] == 0


def test_a_damaged_file_keeps_its_last_good_sessions_until_it_parses_again(env, capsys):
    path = good_session(env, "will-break", word="tapir")
    good_session(env, "stays-fine", word="okapi")
    run(capsys, "index")
    good = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(b"\x00garbage that is not a session\n")
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and any("damaged" in p["reason"] for p in json.loads(out)["skipped"])
    assert search_ids(capsys, "tapir") == ["will-break"]
    status = json.loads(run(capsys, "status", "--json")[1])
    assert [f["path"] for f in status["notIndexed"] if f["state"] == "damaged"] == [path]
    assert "damaged" in run(capsys, "status")[1]
    with open(path, "wb") as f:
        f.write(good.replace(b"tapir", b"bongo"))
    assert search_ids(capsys, "bongo") == ["will-break"] and search_ids(capsys, "tapir") == []


def test_an_edit_that_keeps_the_size_is_reindexed(env, capsys):
    path = good_session(env, "scrubbed", word="sk-SECRETSECRET12")
    run(capsys, "index")
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace("sk-SECRETSECRET12", "xx-REMOVEDREMOVE"))
    assert search_ids(capsys, "REMOVEDREMOVE") == ["scrubbed"]
    assert search_ids(capsys, "SECRETSECRET12") == []


def test_a_middle_rewrite_followed_by_an_append_is_reread_from_the_start(env, capsys):
    w = PiWriter(env, "rewritten")
    for i in range(30):
        w.user("line %d about the gazebo" % i)
    path = w.save()
    run(capsys, "index")
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace("line 12 about the gazebo", "line 12 about the pergola"))
    append_user(path, "an appended note")
    assert search_ids(capsys, "pergola") == ["rewritten"]
    code, out, _ = run(capsys, "show", "rewritten", "--json", "--max-chars", "0")
    assert not any("line 12 about the gazebo" in c["text"] for c in json.loads(out)["chunks"])


def test_truncated_corrupt_and_non_json_lines_are_skipped_and_counted(env, capsys):
    w = PiWriter(env, "bad-lines")
    w.user("first words: okapi")
    w.save()
    with open(w.path, "ab") as f:
        f.write(b'{"type": "message", "timestamp": "2026-03-10T09:00:05.000Z", "message": {"role": "us\n')  # truncated
        f.write(b"this is not json at all\n")
        f.write(b"[1, 2, 3]\n")                          # JSON, not an object
        f.write(b"null\n")
        f.write(b"\x00\x00\x00\x00\n")                    # NUL bytes (a crash while writing)
        f.write(b'{"type": "message", "message": "not a dict"}\n')
        f.write(b'{"type": "message", "timestamp": "2026-03-10T09:00:06.000Z", "message": {"role": "user", '
                b'"content": "invalid\xff\xfeutf8 zebra"}}\n')  # invalid UTF-8: read with U+FFFD, every word kept
        f.write(line({"type": "message", "timestamp": "2026-03-10T09:00:07.000Z",
                      "message": {"role": "user", "content": "last words: quetzal"}}).encode())
        f.write(b'{"type": "message", "message": {"role": "user", "content": "unfinished')   # still being written
    good_session(env)
    s = index_json(capsys)
    assert (s["filesIndexed"], s["sessions"], s["filesSkipped"]) == (2, 2, 0)
    assert s["linesSkipped"] == 7
    assert search_ids(capsys, "okapi") == ["bad-lines"]
    assert search_ids(capsys, "quetzal") == ["bad-lines"]
    assert search_ids(capsys, "zebra") == search_ids(capsys, "invalid utf8") == ["bad-lines"]
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_an_agent_database_damaged_on_disk_is_reported_as_damaged_and_keeps_what_was_indexed(env, capsys, tmp_path):
    """A page of an agent's SQLite store overwritten (a disk error, a copy cut short): the next run
    says the store is damaged in one line (not that a parser failed, nor that it is not a session
    file), keeps its sessions searchable, and reads it again once it is whole."""
    db = ogc_opencode_db(tmp_path / "home" / "opencode" / "opencode.db")
    write_config({"sources": [{"parser": "opencode", "path": str(db.parent)}]}, tmp_path)
    assert index_json(capsys)["sessions"] == 2
    whole = db.read_bytes()
    with open(str(db), "r+b") as f:
        f.seek(4096)
        f.write(b"\xff" * 2048)
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and "Traceback" not in err
    [problem] = json.loads(out)["skipped"]
    assert problem["reason"].startswith("cannot read: damaged SQLite store (") and "parser failed" not in problem["reason"]
    assert [r["sessionId"] for r in search_json(capsys, "cache key wrong", "--no-refresh")["results"]] == ["ses_b"]
    db.write_bytes(whole)
    assert index_json(capsys)["skipped"] == []
    assert [r["sessionId"] for r in search_json(capsys, "cache key wrong")["results"]] == ["ses_b"]


def test_binary_garbage_and_empty_files_are_listed_with_a_reason_and_the_rest_is_indexed(env, capsys):
    folder = env / "--home-dev-proj--"
    folder.mkdir()
    rnd = random.Random(1)
    (folder / "garbage.jsonl").write_bytes(bytes(rnd.getrandbits(8) for _ in range(200000)))
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "blank.jsonl").write_bytes(b"\n\n   \n")
    (folder / "badutf8-header.jsonl").write_bytes(b'{"type": "session", "id": \xff\xff, "cwd": "/x"}\n')
    PiWriter(env, "header-only").save()                  # a session with nothing said yet
    good_session(env)
    s = index_json(capsys)
    reasons = skipped_reasons(s)
    assert set(reasons) == {"garbage.jsonl", "empty.jsonl", "blank.jsonl", "badutf8-header.jsonl"}
    assert all("not a pi session file" in r for r in reasons.values())
    assert s["sessions"] == 2
    assert search_ids(capsys, "pangolin") == ["good-1"]
    # Skipped files are remembered: the next run does not read them again, nor report them as new.
    s = index_json(capsys)
    assert s["filesIndexed"] == 0 and s["filesUnchanged"] == 6


def test_lone_surrogate_escape_in_a_line_does_not_stop_the_run(env, capsys):
    w = PiWriter(env, "surrogate")
    w.user("emoji cut in half \ud83d by a truncating agent, then aardvark")  # json.dumps keeps the escape
    w.save()
    good_session(env)
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and "Traceback" not in err
    assert json.loads(out)["sessions"] == 2
    assert search_ids(capsys, "aardvark") == ["surrogate"]
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_a_line_too_long_for_its_images_is_read_without_them_and_appends_go_on_after_it(tmp_path, monkeypatch, capsys):
    """A message with a dozen screenshots is longer than MAX_LINE_BYTES: its words are found (the
    base64 left out, read in blocks), and the next append is read from just after it. A line as long
    in words is still skipped and counted, the rest of its file read."""
    home = bare_home(tmp_path, monkeypatch)
    monkeypatch.setattr(sesame, "MAX_LINE_BYTES", 256 * 1024)
    folder = home / ".claude" / "projects" / "-tmp-zoo"
    rnd = random.Random(3)
    image = lambda: {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": base64.b64encode(rnd.randbytes(90 * 1024)).decode()}}
    shots = write_jsonl(folder / (cc_SID + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:01Z", "why do the zebrafish screenshots differ?", cwd="/tmp/zoo"),
        cc_cl_asst("a1", "2026-01-01T00:00:02Z", "msg_1", [{"type": "tool_use", "id": "t1", "name": "Read",
                                                             "input": {"file_path": "/tmp/zoo/shots"}}], cwd="/tmp/zoo"),
        cc_cl_user("u2", "2026-01-01T00:00:03Z", [{"type": "tool_result", "tool_use_id": "t1", "content": [
            image(), {"type": "text", "text": "the capybara pixels moved"}, image(), image(), image(), image()]}],
            cwd="/tmp/zoo")])
    assert os.path.getsize(shots) > 2 * sesame.MAX_LINE_BYTES
    other = "22222222-3333-4444-8555-666666666666"
    words = " ".join(rnd.choice(["wombat", "quokka", "dingo"]) for _ in range(80000))
    write_jsonl(folder / (other + ".jsonl"), [
        cc_cl_user("u1", "2026-01-01T00:00:01Z", "a log pasted whole", sessionId=other, cwd="/tmp/zoo"),
        cc_cl_user("u2", "2026-01-01T00:00:02Z", words, sessionId=other, cwd="/tmp/zoo"),
        cc_cl_user("u3", "2026-01-01T00:00:03Z", "after the pasted log: platypus", sessionId=other, cwd="/tmp/zoo")])
    s = index_json(capsys)
    assert (s["sessions"], s["linesSkipped"], s["filesSkipped"]) == (2, 1, 0), s
    assert search_ids(capsys, "capybara pixels") == [cc_SID]
    assert search_ids(capsys, "platypus") == [other]
    assert search_ids(capsys, "quokka") == []   # (the line too long in words)
    with open(shots, "a") as f:
        f.write(json.dumps(cc_cl_asst("a2", "2026-01-01T00:00:04Z", "msg_2", [
            {"type": "text", "text": "the axolotl frame is the odd one"}], cwd="/tmp/zoo")) + "\n")
    s = index_json(capsys)
    assert (s["filesIndexed"], s["linesSkipped"]) == (1, 0), s   # (read from after the long line: no half line)
    assert search_ids(capsys, "axolotl frame") == search_ids(capsys, "capybara zebrafish") == [cc_SID]


def test_both_line_readers_leave_out_base64_runs_across_blocks_and_count_offsets_in_the_file(tmp_path, monkeypatch):
    """A long line's base64 runs are cut wherever its blocks end (a run over several blocks and
    across the first one's end, a short run kept); offsets are the file's, the line's text whole."""
    monkeypatch.setattr(sesame, "MAX_LINE_BYTES", 64 * 1024)
    rnd = random.Random(5)
    blob = lambda n: base64.urlsafe_b64encode(rnd.randbytes(n)).decode()
    text = ["short %s kept" % blob(30), blob(3 * 1024 * 1024), "pika", blob(64 * 1024 - 20), "chu", blob(200 * 1024)]
    first = json.dumps({"n": 1, "parts": text}) + "\n"
    path = write_file(tmp_path / "long.jsonl", first + json.dumps({"n": 2}) + "\n")
    report = ParseReport()
    got = list(sesame.iter_jsonl(str(path), report))
    assert [o for _, o in got] == [{"n": 1, "parts": [text[0], "", "pika", "", "chu", ""]}, {"n": 2}]
    assert [at for at, _ in got] == [len(first), os.path.getsize(path)]
    glued = list(sesame._iter_glued_jsonl(str(path), report))
    assert [(a, b, o["n"]) for a, b, o in glued] == [(0, len(first), 1), (len(first), os.path.getsize(path), 2)]
    assert report.skipped == {}


def test_a_bad_timestamp_costs_at_most_its_date_not_the_whole_session(env, capsys):
    w = PiWriter(env, "bad-offset")
    w.user("first message about narwhal")
    w.entry("message", timestamp="2026-03-10T09:00:00+99:99",
            message={"role": "user", "content": "timestamp from a broken clock", "timestamp": "x"})
    w.entry("message", timestamp="0001-01-01T00:00:00+01:00",
            message={"role": "user", "content": "and one from year one", "timestamp": "y"})
    w.save()
    s = index_json(capsys)
    assert s["filesSkipped"] == 0, s["skipped"]
    assert search_ids(capsys, "narwhal") == ["bad-offset"]


def _write_huge_line_session(root, sid, line_bytes):
    """A pi session with one `line_bytes` line between two ordinary ones, written in 1 MB pieces."""
    w = PiWriter(root, sid)
    w.user("before the huge line: capybara")
    w.save()
    with open(w.path, "ab") as f:
        f.write(b'{"type": "message", "timestamp": "2026-03-10T09:00:30.000Z", "message": {"role": "user", '
                b'"content": "')
        piece = (b"lorem ipsum dolor sit amet " * 40000)[:1 << 20]
        left = line_bytes - 200
        while left > 0:
            f.write(piece[:left])
            left -= len(piece)
        f.write(b'"}}\n')
        f.write(line({"type": "message", "timestamp": "2026-03-10T09:00:40.000Z",
                      "message": {"role": "user", "content": "after the huge line: axolotl"}}).encode())
    return w.path


def test_a_100mb_line_is_skipped_and_counted_with_bounded_memory(env, tmp_path):
    """Runs in a subprocess so that its peak memory (workers included) can be measured."""
    path = _write_huge_line_session(env, "huge-line", 100 * 1024 * 1024)
    assert os.path.getsize(path) > 100 * 1024 * 1024
    for i in range(3):
        good_session(env, "good-%d" % i, word="pangolin%d" % i)
    probe = "import sys; sys.path.insert(0, %r); import sesame; sys.exit(sesame.main(['index', '--json']))" % HERE
    peak = str(tmp_path / "peak")   # (started by a small process: see _PEAK_RUNNER)
    r = subprocess.run([sys.executable, "-I", "-S", "-c", _PEAK_RUNNER, peak, sys.executable, "-c", probe],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    s = json.loads(r.stdout)
    assert (s["filesIndexed"], s["sessions"], s["filesSkipped"], s["linesSkipped"]) == (4, 4, 0, 1)
    with open(peak) as f:
        rss_mb = int(f.read()) / 1024
    print("peak RSS while indexing a 100 MB line: %.0f MB" % rss_mb)
    assert rss_mb < 150, "the huge line was read into memory (%.0f MB)" % rss_mb   # (92 MB measured)
    r = subprocess.run([sys.executable, SESAME, "search", "capybara axolotl", "--json", "--no-refresh"],
                       capture_output=True, text=True)
    assert [x["sessionId"] for x in json.loads(r.stdout)["results"]] == ["huge-line"]
    os.remove(path)


def test_file_that_grows_while_being_indexed_is_complete_after_the_next_run(env, capsys, monkeypatch):
    w = PiWriter(env, "growing")
    w.user("start of a live session: marmot")
    path = w.save()
    good_session(env)
    original = sesame.PiParser.parse

    def parse_while_agent_writes(self, p, report, resume=None, limit=None):
        if p == path:
            with open(p, "a") as f:   # the agent appends a message and half of another
                f.write(line({"type": "message", "timestamp": "2026-03-10T09:10:00.000Z",
                              "message": {"role": "user", "content": "appended meanwhile: wallaby"}}))
                f.write('{"type": "message", "timestamp": "2026-03-10T09:11:00.000Z", "message": {"ro')
        return original(self, p, report, resume=resume, limit=limit)

    monkeypatch.setattr(sesame.PiParser, "parse", parse_while_agent_writes)
    s = index_json(capsys)
    assert s["filesSkipped"] == 0 and s["sessions"] == 2
    monkeypatch.setattr(sesame.PiParser, "parse", original)
    with open(path, "a") as f:   # the agent finishes its line
        f.write('le": "user", "content": "finished later: kinkajou"}}\n')
    index_json(capsys)
    assert search_ids(capsys, "marmot wallaby kinkajou") == ["growing"]
    code, out, _ = run(capsys, "search", "marmot", "--json")
    assert json.loads(out)["resultCount"] == 1
    assert _results(capsys, ["marmot", "wallaby", "kinkajou", "pangolin"]) == \
        _clean_build_results(capsys, monkeypatch, env, ["marmot", "wallaby", "kinkajou", "pangolin"])


def test_file_that_shrinks_or_is_rewritten_while_being_indexed(env, capsys, monkeypatch):
    w = PiWriter(env, "rewritten")
    for i in range(50):
        w.user("old content number %d about tapir" % i)
    path = w.save()
    good_session(env)
    index_json(capsys)
    w2 = PiWriter(env, "rewritten")
    w2.user("new shorter content about ocelot")
    original = sesame.PiParser.parse

    def parse_after_rewrite(self, p, report, resume=None, limit=None):
        if p == path:
            w2.save()   # the file is rewritten, shorter, between the stat and the read
        return original(self, p, report, resume=resume, limit=limit)

    with open(path, "a") as f:
        f.write(line({"type": "message", "timestamp": "2026-03-10T09:10:00.000Z",
                      "message": {"role": "user", "content": "appended"}}))
    monkeypatch.setattr(sesame.PiParser, "parse", parse_after_rewrite)
    s = index_json(capsys)
    assert s["filesSkipped"] == 0
    monkeypatch.setattr(sesame.PiParser, "parse", original)
    index_json(capsys)
    assert search_ids(capsys, "tapir") == []
    assert search_ids(capsys, "ocelot") == ["rewritten"]


def test_file_that_disappears_while_being_indexed_is_reported_and_the_run_goes_on(env, capsys, monkeypatch):
    w = PiWriter(env, "vanishing")
    w.user("here today: gecko")
    path = w.save()
    good_session(env)
    original_open = os.open

    def open_after_delete(p, *a, **kw):
        if p == path and os.path.exists(path):
            os.remove(path)   # deleted between discovery (stat) and parsing
        return original_open(p, *a, **kw)

    monkeypatch.setattr(os, "open", open_after_delete)
    s = index_json(capsys)
    monkeypatch.setattr(os, "open", original_open)
    assert s["filesSeen"] == 2 and s["sessions"] == 1
    assert os.path.basename(path) in skipped_reasons(s)
    assert search_ids(capsys, "pangolin") == ["good-1"]
    s = index_json(capsys)
    assert search_ids(capsys, "gecko") == []


def test_file_that_disappears_after_being_indexed_stays_searchable_marked_deleted(env, capsys, monkeypatch):
    path = good_session(env, "short-lived", word="lemur")
    good_session(env)
    index_json(capsys)
    os.remove(path)
    s = index_json(capsys)
    assert s["filesRemoved"] == 1 and search_ids(capsys, "lemur") == ["short-lived"]
    assert json.loads(run(capsys, "search", "lemur", "--json")[1])["results"][0]["fileDeleted"] is True


def test_files_whose_time_alone_moved_are_not_read_again(env, capsys, monkeypatch):
    """A history copied or restored (every file and folder dated anew) or touched: a file read to
    its end whose indexed bytes are unchanged holds what the index has, and is not parsed again
    (each read from its resume point, to find nothing, took 2.4 s on the first search at 1 GB), by a
    search or by a server's background round. A file that grew is read on; one rewritten to the same
    size (its checksum differs) is read whole."""
    words = ["lemur", "tapir", "okapi", "quokka"]
    paths = {w: good_session(env, "t-" + w, word=w) for w in words}
    index_json(capsys)
    parsed = []
    real = sesame.parse_file
    monkeypatch.setattr(sesame, "parse_file", lambda path, *a, **kw: parsed.append(os.path.basename(path)) or
                        real(path, *a, **kw))

    def redate(when):
        for d, _, fs in os.walk(str(env)):
            for f in fs:
                os.utime(os.path.join(d, f), (when, when))
            os.utime(d, (when, when))
    redate(time.time() - 30)
    assert search_ids(capsys, "lemur") == ["t-lemur"] and parsed == []
    s = index_json(capsys)
    assert (s["filesIndexed"], s["filesUnchanged"]) == (0, 4) and parsed == []

    redate(time.time() - 20)
    assert background_round().indexed == 0 and parsed == []   # (a server's round: the lending path)
    assert index_json(capsys)["filesIndexed"] == 0 and parsed == []

    with open(paths["tapir"], "a") as f:   # grew: read on from its resume point
        f.write(line({"type": "message", "id": "app-1", "parentId": None, "timestamp": "2026-03-11T10:00:00.000Z",
                      "message": {"role": "user", "content": "and the wombat burrow"}}))
    with open(paths["okapi"], "r+") as f:   # the same size, other words: read whole
        text = f.read().replace("the okapi", "the zebra")
        f.seek(0)
        f.write(text)
    redate(time.time() - 10)
    assert search_ids(capsys, "wombat") == ["t-tapir"] and search_ids(capsys, "zebra") == ["t-okapi"]
    assert sorted(parsed) == sorted(os.path.basename(paths[w]) for w in ("tapir", "okapi"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_session_file_replaced_by_a_folder_a_fifo_or_a_dangling_link_keeps_its_session(env, capsys):
    """What takes a session file's place and is no file (a folder, a FIFO, a link to nothing) is
    read as the file gone: its session stays searchable, marked deleted, as for a deleted file
    (a folder or FIFO there removed it from the index, found by a random-damage run)."""
    paths = {word: good_session(env, "s-" + word, word=word) for word in ("lemur", "tapir", "okapi")}
    good_session(env)
    index_json(capsys)
    os.remove(paths["lemur"])
    os.mkdir(paths["lemur"])
    os.remove(paths["tapir"])
    os.mkfifo(paths["tapir"])
    os.remove(paths["okapi"])
    os.symlink(paths["okapi"] + ".nowhere", paths["okapi"])
    assert index_json(capsys)["filesRemoved"] == 3
    for word in paths:
        [r] = json.loads(run(capsys, "search", word, "--json")[1])["results"]
        assert (r["sessionId"], r["fileDeleted"]) == ("s-" + word, True)


def _deny(monkeypatch, path):
    """Make `path` unreadable the way chmod 000 would for a non-root user (tests run as root)."""
    original_open, original_os_open, original_scandir = open, os.open, os.scandir
    path = str(path)

    def guarded_open(p, *a, **kw):
        if str(p) == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return original_open(p, *a, **kw)

    def guarded_os_open(p, *a, **kw):
        if str(p) == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return original_os_open(p, *a, **kw)

    def guarded_scandir(p="."):
        if str(p) == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return original_scandir(p)

    monkeypatch.setattr("builtins.open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    monkeypatch.setattr(os, "scandir", guarded_scandir)


def test_unreadable_new_file_is_listed_and_the_rest_is_indexed(env, capsys, monkeypatch):
    path = good_session(env, "secret", word="wolverine")
    good_session(env)
    _deny(monkeypatch, path)
    s = index_json(capsys)
    assert s["sessions"] == 1 and os.path.basename(path) in skipped_reasons(s)
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_file_that_becomes_unreadable_keeps_what_was_indexed_and_is_retried(env, capsys, monkeypatch):
    path = good_session(env, "secret", word="wolverine")
    good_session(env)
    index_json(capsys)
    with open(path, "a") as f:
        f.write("\n")  # changed while unreadable, so the run has to read it (an unchanged file is not read)
    with monkeypatch.context() as m:
        _deny(m, path)
        s = index_json(capsys)
        reason = skipped_reasons(s).get(os.path.basename(path), "")
        assert "Permission denied" in reason          # says why, not "not a pi session file"
        assert search_ids(capsys, "wolverine", "--no-refresh") == ["secret"]   # README: keeps what was indexed
    s = index_json(capsys)    # readable again, unchanged on disk: it must be read again
    assert search_ids(capsys, "wolverine") == ["secret"]


def test_unreadable_folder_is_listed_with_a_reason(env, capsys, monkeypatch):
    w = PiWriter(env, "in-locked-folder", cwd="/home/dev/locked")  # env/--home-dev-locked--/...
    w.user("the hidden migration plan")
    hidden = w.save()
    good_session(env)
    folder = os.path.dirname(hidden)
    _deny(monkeypatch, folder)
    s = index_json(capsys)
    assert s["sessions"] == 1
    assert any(p["path"] == folder and "Permission denied" in p["reason"] for p in s["skipped"]), s["skipped"]


def test_unreadable_root_folder_does_not_stop_search(env, capsys, monkeypatch):
    good_session(env)
    index_json(capsys)
    _deny(monkeypatch, str(env))
    code, out, err = run(capsys, "search", "pangolin", "--json")
    assert code == 0 and "Traceback" not in err


def test_symlink_loops_and_dangling_links_do_not_hang_or_stop_the_run(env, capsys):
    good_session(env)
    folder = env / "--home-dev-proj--"
    os.symlink(str(env), str(folder / "loop"))                   # folder -> its parent
    os.symlink(str(folder / "self.jsonl"), str(folder / "self.jsonl"))   # a link to itself
    os.symlink(str(folder / "nowhere.jsonl"), str(folder / "dangling.jsonl"))
    os.symlink(str(env), str(env / "--root-loop--"))
    t0 = time.monotonic()
    s = index_json(capsys)
    assert time.monotonic() - t0 < 10
    assert s["sessions"] == 1
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_configured_path_that_does_not_exist_is_a_one_line_warning_and_the_rest_goes_on(env, tmp_path, capsys):
    # Documented (README, Config): an unplugged drive must not stop the other sources.
    good_session(env)
    write_config({"sources": [{"parser": "pi", "path": str(env)},
                              {"parser": "pi", "path": str(tmp_path / "unmounted-drive")}]}, tmp_path)
    for argv in (["index", "--json"], ["search", "pangolin"], ["status"]):
        code, out, err = run(capsys, *argv)
        warnings = [l for l in err.splitlines() if "warning:" in l]
        assert code == 0 and len(warnings) == 1 and "does not exist" in warnings[0] and "Traceback" not in err, err
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_configured_file_that_disappears_after_config_is_loaded(env, tmp_path, capsys, monkeypatch):
    path = good_session(env)
    write_config({"sources": [{"parser": "pi", "path": path}]}, tmp_path)
    original = sesame.resolve_sources

    def resolve_then_delete(*a, **kw):
        sources = original(*a, **kw)
        os.remove(path)
        return sources

    monkeypatch.setattr(sesame, "resolve_sources", resolve_then_delete)
    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and "Traceback" not in err


# -- agent SQLite stores -----------------------------------------------------------------------

OPENCODE_SCHEMA = """
CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, parent_id TEXT, slug TEXT, directory TEXT,
  title TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, time_updated INTEGER, data TEXT);
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, time_created INTEGER,
  time_updated INTEGER, data TEXT);
"""


def make_opencode_db(path, word, wal=False):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    con = sqlite3.connect(str(path), isolation_level=None)
    if wal:
        con.execute("PRAGMA journal_mode=WAL")
    con.executescript(OPENCODE_SCHEMA)
    sid = "ses_" + word
    con.execute("INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
                (sid, "p", None, "s", "/home/u/proj", "Talk about " + word, "1.2.0", 1730000000000, 1730000009000))
    con.execute("INSERT INTO message VALUES (?,?,?,?,?)",
                ("msg_1", sid, 1730000001000, 1730000001000, json.dumps({"role": "user", "time": {"created": 1730000001000}})))
    con.execute("INSERT INTO part VALUES (?,?,?,?,?,?)",
                ("prt_1", "msg_1", sid, 0, 0, json.dumps({"type": "text", "text": "tell me about " + word})))
    return con


def make_crush_db(path, word):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    con = sqlite3.connect(str(path), isolation_level=None)
    con.executescript("""
        CREATE TABLE sessions(id TEXT PRIMARY KEY, parent_session_id TEXT, title TEXT NOT NULL,
            message_count INTEGER, updated_at INTEGER, created_at INTEGER, summary_message_id TEXT);
        CREATE TABLE messages(id TEXT PRIMARY KEY, session_id TEXT, role TEXT, parts TEXT, model TEXT,
            created_at INTEGER, updated_at INTEGER, finished_at INTEGER, provider TEXT, is_summary_message INTEGER DEFAULT 0);
    """)
    con.execute("INSERT INTO sessions VALUES('c-%s', NULL, 'Crush %s', 1, 1754068138, 1754062312, NULL)" % (word, word))
    con.execute("INSERT INTO messages VALUES(?,?,?,?,?,?,?,?,?,?)",
                ("m1", "c-" + word, "user", json.dumps([{"type": "text", "data": {"text": "crush " + word}}]),
                 "m", 1754062312, 1754062312, None, "p", 0))
    return con


@pytest.fixture
def stores(env, tmp_path):
    """Config with pi plus an OpenCode data dir and a folder of Crush projects; returns their paths."""
    oc = tmp_path / "opencode"
    projects = tmp_path / "projects"
    oc.mkdir()
    projects.mkdir()
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "opencode", "path": str(oc)},
                              {"parser": "crush", "path": str(projects)}]}, tmp_path)
    good_session(env)
    make_opencode_db(oc / "opencode.db", "dingo").close()
    make_crush_db(projects / "ok" / ".crush" / "crush.db", "quokka").close()
    return oc, projects


def test_agent_stores_with_garbage_bytes_are_listed_and_the_rest_is_indexed(stores, capsys):
    oc, projects = stores
    with open(oc / "opencode-beta.db", "wb") as f:
        f.write(b"SQLite format 3\x00" + os.urandom(8192))   # a header, then garbage
    (projects / "bad" / ".crush").mkdir(parents=True)
    (projects / "bad" / ".crush" / "crush.db").write_bytes(b"not a database at all" * 500)
    s = index_json(capsys)
    reasons = {p["path"]: p["reason"] for p in s["skipped"]}
    assert set(reasons) == {str(oc / "opencode-beta.db"), str(projects / "bad" / ".crush" / "crush.db")}
    assert all(r for r in reasons.values())
    assert s["sessions"] == 3
    assert search_ids(capsys, "dingo") == ["ses_dingo"]
    assert search_ids(capsys, "quokka") == ["c-quokka"]
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_agent_stores_of_an_unknown_schema_are_listed_as_not_session_files(stores, capsys):
    oc, projects = stores
    con = sqlite3.connect(str(oc / "opencode-dev.db"))
    con.execute("CREATE TABLE session (id TEXT, something_else TEXT)")
    con.commit()
    con.close()
    (projects / "new" / ".crush").mkdir(parents=True)
    con = sqlite3.connect(str(projects / "new" / ".crush" / "crush.db"))
    con.execute("CREATE TABLE sessions (uid TEXT)")
    con.commit()
    con.close()
    s = index_json(capsys)
    reasons = {os.path.relpath(p["path"], str(oc.parent)): p["reason"] for p in s["skipped"]}
    assert "unknown schema" in reasons["opencode/opencode-dev.db"]
    assert "unknown schema" in reasons["projects/new/.crush/crush.db"]
    assert s["sessions"] == 3


def test_locked_agent_store_without_wal_is_read_without_waiting(stores, capsys):
    oc, _ = stores
    con = sqlite3.connect(str(oc / "opencode.db"), isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")   # the agent is in the middle of a write
    try:
        t0 = time.monotonic()
        s = index_json(capsys)
        assert time.monotonic() - t0 < 5
        assert s["sessions"] == 3 and s["filesSkipped"] == 0
    finally:
        con.execute("ROLLBACK")
        con.close()


def test_locked_agent_store_in_wal_mode_is_listed_and_retried_next_run(stores, capsys, monkeypatch):
    oc, _ = stores
    monkeypatch.setattr(sesame.open_agent_db, "__defaults__", (1, 1.0))   # one attempt: keeps the test fast
    con = make_opencode_db(oc / "opencode-wal.db", "bilby", wal=True)
    con.execute("PRAGMA locking_mode=EXCLUSIVE")
    con.execute("BEGIN EXCLUSIVE")
    con.execute("UPDATE session SET title=title")
    try:
        s = index_json(capsys)
        reasons = skipped_reasons(s)
        assert "locked" in reasons.get("opencode-wal.db", ""), s["skipped"]
        assert s["sessions"] == 3
        assert search_ids(capsys, "dingo", "--no-refresh") == ["ses_dingo"]
    finally:
        con.execute("COMMIT")
        con.close()   # the lock goes away
    s = index_json(capsys)
    assert s["filesIndexed"] == 1 and s["filesSkipped"] == 0
    assert search_ids(capsys, "bilby") == ["ses_bilby"]


def test_deeply_nested_json_is_one_bad_line_and_later_appends_are_still_read(env, capsys):
    w = PiWriter(env, "deep-json")
    w.user("before the deep line: wombat")
    path = w.save(extra="[" * 100000 + "\n" + '{"a": ' * 50000 + "1" + "}" * 50000 + "\n")
    append_user(path, "after the deep lines: quokka")
    s = index_json(capsys)
    assert s["filesIndexed"] == 1 and s["filesSkipped"] == 0 and s["linesSkipped"] == 2, s
    assert search_ids(capsys, "wombat") == ["deep-json"] and search_ids(capsys, "quokka") == ["deep-json"]
    append_user(path, "appended later: numbat")
    assert search_ids(capsys, "numbat") == ["deep-json"]


def test_records_after_a_power_loss_run_of_nul_bytes_are_read(env, capsys):
    # A file system that loses power while a file grows keeps its new length with the unwritten
    # blocks zero-filled; the agent then appends after the NULs. Every whole record is searchable.
    w = PiWriter(env, "power-loss")
    w.user("written before the crash: pangolin")
    path = w.save(extra="\0" * 4096)
    s = index_json(capsys)
    assert s["filesIndexed"] == 1 and search_ids(capsys, "pangolin") == ["power-loss"]
    append_user(path, "written after the restart: echidna")
    assert search_ids(capsys, "echidna") == ["power-loss"]
    with open(path, "a") as f:
        f.write("\0" * 512 + "\n")  # a zero-filled block that ended in the newline of a lost record
    append_user(path, "and later still: wallaby")
    s = index_json(capsys, "--full")
    assert s["linesSkipped"] == 1, s  # the zero-filled block: a record was lost there, and that is said
    assert [search_ids(capsys, w) for w in ("pangolin", "echidna", "wallaby")] == [["power-loss"]] * 3


def test_a_crash_that_zeroes_indexed_lines_loses_nothing_and_later_appends_go_after_them(env, capsys):
    # The agent wrote four messages, Sesame indexed them from the page cache, the machine crashed
    # before two of them reached the disk (zero-filled), then the session was resumed.
    w = PiWriter(env, "crashed")
    for word in ("aardvark", "bison", "cheetah", "dingo"):
        w.user("talk about %s" % word)
    path = w.save()
    index_json(capsys)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines[2], lines[3] = b"\0" * len(lines[2]), b"\0" * len(lines[3])
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))
    s = index_json(capsys)
    assert (s["linesSkipped"], s["chunksKept"]) == (2, 2), s
    append_user(path, "after the crash: ibex")
    s = index_json(capsys)
    assert s["chunksKept"] == 2, s
    code, out, _ = show(capsys, "crashed", "--json")
    assert [c["text"] for c in json.loads(out)["chunks"]] == [
        "talk about aardvark", "talk about bison", "talk about cheetah", "talk about dingo", "after the crash: ibex"]
    assert search_ids(capsys, "cheetah") == ["crashed"]


def test_bytes_zeroed_after_where_an_append_would_be_read_from_lose_nothing(env, capsys, tmp_path):
    # A Codex prompt waits for its second copy (event_msg), so the file is read on from before it;
    # a block zeroed there (bytes overwritten, the size the same) was read from that point alone, as
    # an append is, and the prompt indexed from those bytes was lost.
    write_config({"sources": [{"parser": "codex", "path": str(tmp_path / "sessions")}]}, tmp_path)
    waiting = cc_cx("2025-11-17T21:40:00.000Z", "response_item", {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "and then the numbat burrow"}]})
    path = write_jsonl(cc_rollout(tmp_path), [cc_cx_meta()] + codex_turn(1, "talk about the quokka", "Quokkas smile.")
                       + [waiting])
    index_json(capsys)
    assert search_ids(capsys, "numbat") == [cc_TID]
    with open(path, "rb") as f:
        data = f.read()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.seek(last + 10)
        f.write(b"\0" * 40)
    s = index_json(capsys)
    assert (s["linesSkipped"], s["chunksKept"]) == (1, 1), s
    assert search_ids(capsys, "numbat") == [cc_TID] and search_ids(capsys, "quokka") == [cc_TID]


def test_a_damaged_session_file_larger_than_a_slice_loses_nothing(env, capsys, tmp_path, monkeypatch):
    # A file larger than a slice is parsed slice by slice; read again from its start after damage,
    # its lost chunks were kept only when the first slice held the whole session: a 10 MB session
    # cut at 8 MB lost 1,300 chunks. (Slices made small here: the same code path.)
    monkeypatch.setattr(sesame, "SLICE_BYTES", 2048)
    projects = tmp_path / "claude" / "projects"
    write_config({"sources": [{"parser": "claude", "path": str(projects)}]}, tmp_path)
    words = ["word%02d" % i for i in range(40)]
    recs = [cc_cl_user("u%d" % i, "2026-01-21T06:19:%02d.000Z" % i, "talk about %s %s" % (w, "filler " * 20))
            for i, w in enumerate(words)]
    path = write_jsonl(projects / "-home-u-proj" / (cc_SID + ".jsonl"), recs)
    assert os.path.getsize(path) > 4 * 2048
    assert index_json(capsys)["chunks"] == 40
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) * 3 // 5])   # cut inside a line, past the first slice
    s = index_json(capsys)
    assert s["chunksKept"] >= 15 and all(search_ids(capsys, w) == [cc_SID] for w in (words[0], words[30], words[39])), s
    with open(path, "r+b") as f:   # then a block zeroed in what is left
        f.seek(len(data) // 5)
        f.write(b"\0" * 600)
    s = index_json(capsys)
    assert s["linesSkipped"] >= 2 and all(search_ids(capsys, w) == [cc_SID] for w in words), s
    code, out, _ = show(capsys, cc_SID, "--json")
    assert [c["text"].split()[2] for c in json.loads(out)["chunks"]] == words


def test_chunks_kept_from_a_damaged_file_go_back_in_their_place_and_match_by_text():
    def row(text, level=1):
        return ("user", "user", None, None, "t", zlib.compress(text.encode(), level) if len(text) > 50 else text)
    old = [row("a"), row("b"), row("c" * 100), row("d"), row("e")]
    new = [row("a"), row("c" * 100, level=9), row("e"), row("f")]  # b and d lost; c compressed apart
    rows, kept = sesame.merge_kept(old, new)
    assert kept == 2 and [sesame.unpack(r[5]) for r in rows] == ["a", "b", "c" * 100, "d", "e", "f"]


def test_a_session_file_cut_short_keeps_what_was_indexed_but_a_rewrite_is_followed(env, capsys, tmp_path):
    projects = tmp_path / "claude" / "projects"
    write_config({"sources": [{"parser": "claude", "path": str(projects)}]}, tmp_path)
    recs = [cc_cl_user("u%d" % i, "2026-01-21T06:19:%02d.000Z" % i, "talk about %s" % w)
            for i, w in enumerate(("emu", "ferret", "gibbon", "hyena"))]
    path = write_jsonl(projects / "-home-u-proj" / (cc_SID + ".jsonl"), recs)
    index_json(capsys)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])  # cut inside a line: bytes were lost
    s = index_json(capsys)
    assert s["chunksKept"] >= 2 and [search_ids(capsys, w) for w in ("emu", "ferret", "gibbon", "hyena")] == [[cc_SID]] * 4
    write_jsonl(path, recs[:1])  # rewritten whole, shorter, on a line end: the index follows the file
    s = index_json(capsys)
    assert s["chunksKept"] == 0 and search_ids(capsys, "emu") == [cc_SID] and search_ids(capsys, "hyena") == []


def test_a_session_file_saved_with_a_byte_order_mark_is_read_whole(env, capsys):
    w = PiWriter(env, "bom-saved")
    w.user("the header line starts with a byte order mark: manatee")
    path = w.save()
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"))  # as a Windows editor saves it
    s = index_json(capsys)
    assert (s["filesIndexed"], s["filesSkipped"], s["linesSkipped"]) == (1, 0, 0), s
    assert search_ids(capsys, "manatee") == ["bom-saved"]


def test_a_whole_json_session_saved_as_utf16_is_read(tmp_path):
    # Windows PowerShell's Out-File writes UTF-16 with a byte order mark; json reads every UTF it
    # detects, but stripping NULs around the document first (for a zero-filled tail) cut its last
    # character in half.
    chats = ogc_gemini_chats(tmp_path)
    doc = json.dumps(dict(ogc_GEMINI_META, sessionId="g-utf16", messages=[{"id": "m1", "type": "user", "content": "quokka den"}]))
    for encoding in ("utf-16", "utf-16-le"):
        f = write_file(chats / ("session-2025-01-01T00-00-%s.json" % encoding), "")
        with open(f, "wb") as fh:
            fh.write(doc.encode(encoding))
        s = parse_file("gemini", f)[0]
        assert s.session_id == "g-utf16" and texts(s, "user") == ["quokka den"], encoding


def test_a_whole_json_session_with_a_zero_filled_tail_is_read(tmp_path):
    chats = ogc_gemini_chats(tmp_path)
    f = write_file(chats / "session-2025-01-01T00-00-cccc.json", json.dumps(dict(
        ogc_GEMINI_META, sessionId="g-tail", messages=[{"id": "m1", "type": "user", "content": "numbat burrow"}]),
        indent=2) + "\0" * 4096)
    s = parse_file("gemini", f)[0]
    assert s.session_id == "g-tail" and texts(s, "user") == ["numbat burrow"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_where_a_session_or_its_sidecar_should_be_never_blocks_indexing(env, tmp_path):
    # open() on a FIFO waits for a writer forever: a FIFO named like a session file, or put where an
    # agent keeps a sidecar (Gemini's .project_root, pi's sessions-meta), must be passed over.
    pi = PiWriter(env, "pi-beside-fifos")
    pi.user("a pi session beside fifos: capybara").save()
    os.mkfifo(os.path.join(os.path.dirname(pi.path), "2026-01-01T00-00-00-000Z_fifo.jsonl"))
    os.makedirs(tmp_path / "sessions-meta")
    os.mkfifo(tmp_path / "sessions-meta" / "pi-beside-fifos.meta.json")
    chats = ogc_gemini_chats(tmp_path)
    write_jsonl(chats / "session-2026-04-29T21-39-g1.jsonl", [ogc_GEMINI_META, {
        "id": "u1", "timestamp": "2026-04-29T21:39:30Z", "type": "user", "content": [{"text": "gemini beside a fifo: tapir"}]}])
    os.mkfifo(chats.parent / ".project_root")
    write_config({"sources": [{"parser": "pi", "path": str(env)},
                              {"parser": "gemini", "path": str(tmp_path / ".gemini" / "tmp")}]}, tmp_path)
    r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "index", "--json"], env=dict(os.environ),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    found = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "search", "capybara OR tapir", "--json"],
                           env=dict(os.environ), capture_output=True, text=True, timeout=60)
    ids = sorted(x["sessionId"] for x in json.loads(found.stdout)["results"])
    assert ids == ["g-1", "pi-beside-fifos"], found.stdout
    os.remove(tmp_path / "data" / "sweep")
    os.mkfifo(tmp_path / "data" / "sweep")  # where the sweep goes on from: read like any file, then replaced
    found = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "search", "tapir", "--json"],
                           env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert [x["sessionId"] for x in json.loads(found.stdout)["results"]] == ["g-1"], found.stderr
    os.remove(tmp_path / "config" / "config.jsonc")
    os.mkfifo(tmp_path / "config" / "config.jsonc")  # even the config: one line, exit 1
    r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "status"], env=dict(os.environ),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "config.jsonc: cannot read: not a regular file" in r.stderr, r.stderr


def test_the_mcp_server_survives_deep_json_and_lone_surrogates(corpus, capsys):
    assert sesame.handle_line(b"[" * 100000)["error"]["code"] == sesame.PARSE_ERROR
    assert sesame.handle_line(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": ' + b'{"a":' * 50000 + b"1" +
                              b"}" * 50001)["error"]["code"] == sesame.PARSE_ERROR
    for args in ({"query": "carousel \ud800"}, {"query": "carousel", "cwd": "/home/\ud800"},
                 {"query": "carousel", "path": "\udcff"}, {"query": "carousel", "tool": ["\ud800"]}):
        reply = sesame.handle_line(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                               "params": {"name": "search", "arguments": args}}))
        assert reply["result"]["isError"] is False, reply
    reply = sesame.handle_line(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                           "params": {"name": "show", "arguments": {"session": "\ud800"}}}))
    assert reply["result"]["isError"] is True and "no session matches" in reply["result"]["content"][0]["text"]
    assert "Traceback" not in capsys.readouterr().err
    out = io.StringIO()
    sesame.serve_mcp(io.BytesIO(b"[" * 100000 + b"\n" + b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}\n'), out)
    replies = [json.loads(l) for l in out.getvalue().splitlines()]
    assert replies[0]["error"]["code"] == sesame.PARSE_ERROR and replies[1] == {"jsonrpc": "2.0", "id": 4, "result": {}}


def test_a_damaged_stored_chunk_is_shown_as_damaged_and_index_full_repairs_it(env, tmp_path, capsys):
    w = PiWriter(env, "damaged-chunk")
    w.user("a short question about the axolotl tank")
    w.assistant("a long answer about the axolotl tank: " + "water chemistry and filters. " * 60)
    path = w.save()
    good_session(env, "other-ok", word="gharial")
    run(capsys, "index")
    con = sqlite3.connect(str(tmp_path / "data" / "index.sqlite"))
    with con:
        assert con.execute("UPDATE chunks SET text = X'789c0badc0ffee' WHERE typeof(text) = 'blob'").rowcount == 1
    con.close()
    code, out, err = run(capsys, "show", "damaged-chunk")
    assert code == 0 and "axolotl tank" in out and "[damaged chunk" in out and "Traceback" not in err
    code, out, err = run(capsys, "search", "water chemistry filters")
    assert code == 0 and "1. damaged-" in out and "Traceback" not in err
    append_user(path, "an appended line rewrites the last part")    # the refresh cannot use the damaged text
    code, out, err = run(capsys, "search", "gharial")
    assert code == 0 and "other-ok" in out and "Traceback" not in err
    code, _, err = run(capsys, "index")
    assert code == 1 and one_line_error(err) and "sesame index --full" in err
    assert run(capsys, "index", "--full")[0] == 0
    code, out, _ = run(capsys, "show", "damaged-chunk")
    assert code == 0 and "water chemistry" in out and "[damaged chunk" not in out


def test_search_fields_without_json_and_a_huge_reference_are_one_line_errors(corpus, capsys):
    code, out, err = run(capsys, "search", "carousel", "--fields", "score,name")
    assert code == 2 and one_line_error(err) and "--json" in err and out == ""
    code, out, _ = run(capsys, "search", "carousel", "--fields", "minimal", "--json")
    assert code == 0 and json.loads(out)["results"][0]["sessionId"] == "bbbb2222-carousel"
    for n in (5000, 60000):
        code, out, err = run(capsys, "show", "a" * n)
        assert code == 1 and one_line_error(err) and "no session matches" in err and "busy" not in err
        assert len(err) < 400
    r = mcp_call("search", {"query": "carousel", "fields": "matches"})
    assert r["isError"] is False and r["structuredContent"]["results"][0]["matches"]


def _read_only_layouts(data):
    """Ways to make the index folder `data` read-only for a command: (name, prefix for the command
    line, undo). An ordinary user gets chmod (folder 0500, or files 0400); root ignores permissions,
    so it gets a read-only bind mount in a private mount namespace, when unshare works here."""
    def chmod(folder_mode):
        def apply():
            for f in os.listdir(data):
                os.chmod(os.path.join(data, f), 0o400)
            os.chmod(data, folder_mode)
        return apply

    def undo():
        os.chmod(data, 0o700)
        for f in os.listdir(data):
            os.chmod(os.path.join(data, f), 0o600)
    if os.geteuid() != 0:
        return [("read-only folder", [], chmod(0o500), undo), ("read-only files", [], chmod(0o700), undo)]
    mount = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', data]
    try:
        if subprocess.run(mount + ["true"], capture_output=True, timeout=30).returncode == 0:
            return [("read-only mount", mount, lambda: None, lambda: None)]
    except OSError:
        pass
    return []


def test_a_read_only_index_still_answers_search_and_show_and_says_why_it_is_not_updated(env, tmp_path, capsys):
    PiWriter(env, "ro-1").user("the ibex in the read-only index").save()
    assert run(capsys, "index")[0] == 0
    data = str(tmp_path / "data")
    layouts = _read_only_layouts(data)
    if not layouts:
        pytest.skip("running as root without a way to mount the index folder read-only")
    for layout, prefix, apply, undo in layouts:
        apply()
        try:
            for argv in (("search", "ibex", "--no-refresh"), ("search", "ibex"), ("show", "ro-1", "--no-refresh"),
                         ("show", "ro-1"), ("status",), ("index",)):
                p = subprocess.run(prefix + [sys.executable, os.path.join(HERE, "sesame.py")] + list(argv),
                                   capture_output=True, text=True, timeout=120)
                code, out, err = p.returncode, p.stdout, p.stderr
                assert "FTS5" not in err and "Traceback" not in err, (layout, argv, err)
                if argv[0] == "index":
                    assert code == 1 and one_line_error(err), (layout, err)
                    assert "cannot be written" in err or "Permission denied" in err or "read-only" in err, err
                    continue
                assert code == 0 and ("ro-1" in out or "1 sessions" in out), (layout, argv, out, err)
                if argv[-1] != "--no-refresh" and argv[0] != "status":
                    assert "using it as it is" in err, (layout, argv, err)
        finally:
            undo()


def test_a_read_only_index_still_answers_an_mcp_servers_calls(env, tmp_path, capsys):
    """The server keeps a second connection for a call's counts and ranking: on an index it cannot
    write, a call of several words still answers from the index as it is."""
    PiWriter(env, "ro-2").user("the ibex climbs the read-only cliff").save()
    PiWriter(env, "ro-3").user("the markhor climbs elsewhere").save()
    assert run(capsys, "index")[0] == 0
    layouts = _read_only_layouts(str(tmp_path / "data"))
    if not layouts:
        pytest.skip("running as root without a way to mount the index folder read-only")
    for layout, prefix, apply, undo in layouts:
        apply()
        try:
            p = subprocess.Popen(prefix + [sys.executable, os.path.join(HERE, "sesame.py"), "mcp"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            asks = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                     "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}] + \
                   [{"jsonrpc": "2.0", "id": 2 + k, "method": "tools/call", "params": {"name": "search", "arguments": {
                       "query": q}}} for k, q in enumerate(["ibex climbs cliff", "climbs", "markhor climbs elsewhere"])]
            out, err = p.communicate("".join(json.dumps(a) + "\n" for a in asks).encode(), timeout=120)
            replies = [json.loads(line) for line in out.decode().splitlines()]
            assert b"Traceback" not in err, (layout, err)
            found = [[r["sessionId"] for r in reply["result"]["structuredContent"]["results"]] for reply in replies[1:]]
            assert found[0][0] == "ro-2" and set(found[1]) == {"ro-2", "ro-3"} and found[2][0] == "ro-3", (layout, found)
        finally:
            undo()


def test_the_fts5_message_is_only_for_a_missing_fts5_module():
    class Con:
        def __init__(self, message):
            self.message = message

        def execute(self, sql):
            raise sqlite3.OperationalError(self.message)
    with pytest.raises(sesame.SesameError, match="lacks the FTS5"):
        sesame.check_fts5(Con("no such module: fts5"))
    for cause in ("attempt to write a readonly database", "disk I/O error", "unable to open database file"):
        with pytest.raises(sqlite3.OperationalError, match=cause):
            sesame.check_fts5(Con(cause))


# -------------------------------------------------------------------------------------------------
# Queries: fuzz the search box and the filters
# -------------------------------------------------------------------------------------------------

FTS_BITS = ['AND', 'OR', 'NOT', 'NEAR', 'NEAR(', '(', ')', '{', '}', ':', '^', '*', '-', '+', '"', "'", '""',
            'name:', 'talk:', '{name talk}:', 'docs_fts', 'rank', 'bm25(', '*)', '-"', '"*', '--', '- -']
SQL_BITS = ["'; DROP TABLE sessions; --", '" OR 1=1 --', "UNION SELECT * FROM meta", "%", "_", "\\", "\\%",
            "/*", "*/", ";", "?", "?1", ":name", "@x", "$x", "ESCAPE", "LIKE", "x' OR 'a'='a"]
WORDS = ['carousel', 'pangolin', 'flake.nix', 'OPS-306', 'std::vector<int>', 'parser.py', "it's", 'C++',
         'e403', 'x', 'a', 'the', '0', '1.5e10', 'café', 'naïve', 'straße', 'İstanbul']
UNICODE_BITS = ['🙂', '👩‍💻', '中文', 'العربية', '\u200b', '\u202e', '\ufeff', '\u2028', 'e\u0301', '\uffff',
                '\U0001f600' * 3, 'ﬁ', 'Ⅻ', '\u00a0', '\u3000']
CONTROL = [chr(i) for i in range(0, 32)] + ['\x7f']
GOOD_DATES = ['7d', '2w', '3m', '1y', '12h', 'today', 'yesterday', '2026-01-01', '2026-03-10T09:00:00Z',
              '2026-03-10T09:00:00+02:00', '0d', '2026-12-31T23:59:59.999999999Z']
BAD_DATES = ['', ' ', 'someday', 'last tuesday', '2026-13-01', '2026-02-30', '-1d', '1.5d', 'd', '7 days',
             '99999999999999999999d', '99999999y', '1e9', '2026', '26-01-01', 'now', '\x00', '🙂',
             '2026-01-01T25:00:00Z', '2026-01-01 junk']
NUMBERS = ['0', '-1', '1', '2', '10', '50', '999999', str(10 ** 30), '-' + str(10 ** 30), 'abc', '', '1.5',
           '0x10', ' 3', '1e3', '٣']


def _random_query(rnd):
    kind = rnd.random()
    if kind < 0.03:
        return ""
    if kind < 0.06:
        return rnd.choice(["x" * rnd.randint(1000, 20000), " ".join(rnd.choice(WORDS) for _ in range(500)),
                           '"' * 1000, "*" * 5000, "-a " * 300])
    pools = [FTS_BITS, SQL_BITS, WORDS, WORDS, UNICODE_BITS, CONTROL]
    parts = []
    for _ in range(rnd.randint(1, 8)):
        bit = rnd.choice(rnd.choice(pools))
        r = rnd.random()
        if r < 0.1:
            bit = "-" + bit
        elif r < 0.2:
            bit = bit + "*"
        elif r < 0.3:
            bit = '"' + bit
        parts.append(bit)
    return rnd.choice([" ", "", "  ", "\t"]).join(parts)


def _random_filters(rnd):
    args = []
    for flag, values in (("--after", GOOD_DATES + BAD_DATES), ("--before", GOOD_DATES + BAD_DATES),
                         ("--limit", NUMBERS), ("--offset", NUMBERS),
                         ("--cwd", ["/", "/home/dev", "relative/dir", "~", "", "/x\x00y", "../..", "%", "_"]),
                         ("--agent", ["pi", "claude-code", "nosuch", "", "PI", "pi; DROP"]),
                         ("--tool", ["bash", "read", "", "%", "nosuch", "Bash"]),
                         ("--path", ["src", "%", "_", "\\", "", "'"])):
        if rnd.random() < 0.15:
            args += [flag, rnd.choice(values)]
    if rnd.random() < 0.1:
        args.append("--tools")
    return args


@pytest.fixture
def small_index(env, capsys):
    w = PiWriter(env, "bbbb2222-carousel", cwd="/home/dev/site", start="2026-02-01T10:00:00.000Z")
    w.user("Build an image carousel for the company website.").assistant("Added a Carousel component.")
    w.tool("bash", {"command": "npm test"}, "E403 forbidden from bucket")
    w.entry("session_info", name="Landing page carousel")
    w.save()
    good_session(env)
    index_json(capsys)
    return env


def _check_fuzz(capsys, argvs):
    """Run every argv in-process; return the failures as readable strings."""
    failures = []
    for argv in argvs:
        try:
            code = sesame.main(argv)
        except BaseException as e:  # a traceback the user would see (SystemExit included)
            capsys.readouterr()
            failures.append("%r -> %s: %s" % (argv, type(e).__name__, e))
            continue
        out, err = capsys.readouterr()
        if code not in (0, 1, 2):
            failures.append("%r -> exit %r" % (argv, code))
        elif code in (1, 2) and not one_line_error(err):
            failures.append("%r -> exit %d with stderr %r" % (argv, code, err[:300]))
        elif code == 0:
            try:
                data = json.loads(out)
            except ValueError:
                failures.append("%r -> exit 0 but stdout is not JSON: %r" % (argv, out[:200]))
                continue
            assert isinstance(data["results"], list)
    return failures


def _fuzz_argvs(seed, n, surrogates=False):
    rnd = random.Random(seed)
    argvs = []
    for _ in range(n):
        q = _random_query(rnd)
        if surrogates and rnd.random() < 0.5:   # what Python makes of undecodable bytes in argv
            q += " " + os.fsdecode(bytes(rnd.getrandbits(8) | 0x80 for _ in range(3)))
        # Options first, then the query (after "--" half of the time, as a script would pass it).
        argvs.append(["search"] + _random_filters(rnd) + ["--no-refresh", "--json"]
                     + (["--"] if rnd.random() < 0.5 else []) + [q])
    return argvs


@slow
def test_fuzzed_queries_and_filters_never_crash(small_index, capsys):
    argvs = _fuzz_argvs(seed=20260310, n=2000)
    t0 = time.monotonic()
    failures = _check_fuzz(capsys, argvs)
    print("fuzz: %d searches in %.1fs" % (len(argvs), time.monotonic() - t0))
    assert not failures, "\n".join(failures[:20])


def test_fuzz_finds_the_expected_results_for_plain_words(small_index, capsys):
    assert search_ids(capsys, "carousel", "--no-refresh") == ["bbbb2222-carousel"]
    assert search_ids(capsys, "'; DROP TABLE sessions; --", "carousel", "--no-refresh") == ["bbbb2222-carousel"]
    assert search_ids(capsys, "carousel", "--limit", str(10 ** 30), "--no-refresh") == ["bbbb2222-carousel"]
    for bad in ("0", "-1"):
        code, _, err = run(capsys, "search", "carousel", "--limit", bad)
        assert code == 2 and one_line_error(err)


def test_fuzzed_queries_with_undecodable_bytes_never_crash(small_index, capsys):
    failures = _check_fuzz(capsys, _fuzz_argvs(seed=7, n=300, surrogates=True))
    failures += _check_fuzz(capsys, [["search", "carousel", "--cwd", os.fsdecode(b"/home/\xff"), "--no-refresh", "--json"],
                                     ["search", "carousel", "--path", os.fsdecode(b"\xfe"), "--no-refresh", "--json"]])
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("value", ["2026-01-01T10:00:00+99:99", "0001-01-01T00:00:00+01:00",
                                   "9999-12-31T23:59:59-14:00"])
def test_out_of_range_dates_are_usage_errors(small_index, capsys, value):
    for flag in ("--after", "--before"):
        code, _, err = run(capsys, "search", "carousel", flag, value, "--no-refresh")
        assert code in (0, 2) and (code == 0 or one_line_error(err))


# -------------------------------------------------------------------------------------------------
# Faults of the index
# -------------------------------------------------------------------------------------------------

def test_corrupt_index_with_wal_and_shm_is_set_aside_and_rebuilt(env, capsys, tmp_path):
    good_session(env)
    index_json(capsys)
    db = tmp_path / "data" / "index.sqlite"
    with open(db, "r+b") as f:          # keep the SQLite header, destroy the pages
        f.seek(100)
        f.write(os.urandom(200000))
    (tmp_path / "data" / "index.sqlite-wal").write_bytes(os.urandom(5000))
    code, out, err = run(capsys, "search", "pangolin", "--json")
    assert code == 0 and "corrupt" in err and "Traceback" not in err
    assert [r["sessionId"] for r in json.loads(out)["results"]] == ["good-1"]
    # The damaged file is kept for inspection (an invalid WAL is simply discarded by SQLite).
    assert any(n.startswith("index.sqlite.corrupt-") for n in os.listdir(tmp_path / "data"))


def test_corrupt_pages_found_during_search_are_a_one_line_error_and_index_full_repairs(env, capsys, tmp_path):
    rnd = random.Random(5)
    for i in range(30):
        w = PiWriter(env, "corrupt-%02d" % i)
        for j in range(40):
            w.user(" ".join(rnd.choice(["alpha", "beta", "gamma", "pangolin"]) + str(rnd.randint(0, 999))
                            for _ in range(300)))
        w.save()
    index_json(capsys)
    db = tmp_path / "data" / "index.sqlite"
    size = os.path.getsize(db)
    with open(db, "r+b") as f:   # the schema and meta pages survive; the FTS pages at the end do not
        f.seek(size // 2)
        f.write(random.Random(6).randbytes(size - size // 2))
    try:
        code, out, err = run(capsys, "search", "pangolin1", "--json")
    except sqlite3.DatabaseError as e:
        pytest.fail("traceback: %s: %s" % (type(e).__name__, e))
    assert code in (0, 1) and one_line_error(err) and "damaged" in err and "--full" in err, err
    code, out, err = run(capsys, "index", "--full")
    assert code == 0, err
    assert len(search_ids(capsys, "pangolin1", "--limit", "50")) > 0


def test_index_from_a_newer_sesame_is_refused_and_left_untouched(env, capsys, tmp_path):
    good_session(env)
    index_json(capsys)
    db = str(tmp_path / "data" / "index.sqlite")
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    before = os.path.getsize(db)
    for argv in (["search", "pangolin"], ["index"], ["index", "--full"], ["status"]):
        code, _, err = run(capsys, *argv)
        assert code == 1 and "newer Sesame" in err and one_line_error(err), (argv, err)
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    con.close()
    assert os.path.getsize(db) == before


def _disk_full(monkeypatch, extra_pages=1):
    """Real SQLITE_FULL: cap the index at its current size plus a page, as a full disk would."""
    original = sesame.Store._connect.__func__

    def capped(cls, path):
        store = original(cls, path)
        n = store.con.execute("PRAGMA page_count").fetchone()[0]
        store.con.execute("PRAGMA max_page_count=%d" % (n + extra_pages))
        return store

    monkeypatch.setattr(sesame.Store, "_connect", classmethod(capped))


def _more_sessions(root, n=40, word="wombat"):
    for i in range(n):
        w = PiWriter(root, "more-%03d" % i, start="2026-03-12T09:00:00.000Z")
        for j in range(30):
            w.user("%s %d %d %s" % (word, i, j, "filler text with several words " * 20))
        w.save()


def test_disk_full_while_indexing_is_exit_1_with_a_message_and_the_index_stays_searchable(env, capsys, monkeypatch):
    good_session(env)
    index_json(capsys)
    _more_sessions(env)
    _disk_full(monkeypatch)
    code, out, err = run(capsys, "index")
    assert code == 1 and one_line_error(err) and "full" in err, err
    assert search_ids(capsys, "pangolin", "--no-refresh") == ["good-1"]
    monkeypatch.undo()


def test_disk_full_write_error_raised_on_insert_is_exit_1(env, capsys, monkeypatch):
    good_session(env)
    index_json(capsys)
    _more_sessions(env, n=3)

    def full(*a, **kw):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sesame.Store, "write_session", full)
    code, out, err = run(capsys, "index", "--json")
    assert code == 1 and one_line_error(err) and "disk is full" in err
    assert json.loads(out)["error"]["code"] == "index"
    assert search_ids(capsys, "pangolin", "--no-refresh") == ["good-1"]


def test_search_still_answers_when_the_refresh_cannot_write(env, capsys, monkeypatch):
    good_session(env)
    index_json(capsys)
    _more_sessions(env)
    _disk_full(monkeypatch)
    code, out, err = run(capsys, "search", "pangolin", "--json")
    assert code == 0, err
    assert [r["sessionId"] for r in json.loads(out)["results"]] == ["good-1"]
    assert "full" in err    # with a warning that the index could not be updated


def test_failed_full_rebuild_keeps_the_old_index(env, capsys, monkeypatch):
    good_session(env)
    index_json(capsys)
    _more_sessions(env, n=60)
    _disk_full(monkeypatch, extra_pages=4)
    code, _, err = run(capsys, "index", "--full")
    assert code == 1 and one_line_error(err)
    assert search_ids(capsys, "pangolin", "--no-refresh") == ["good-1"]


def _read_only_index(monkeypatch, index_file):
    """The data directory is read-only: open the index with SQLite's read-only mode (root ignores chmod)."""
    real_connect = sqlite3.connect

    def connect(path, *a, **kw):
        if str(path) == str(index_file):
            kw.pop("check_same_thread", None)
            return real_connect("file:%s?mode=ro" % path, *a, uri=True, check_same_thread=False, **kw)
        return real_connect(path, *a, **kw)

    monkeypatch.setattr(sesame.sqlite3, "connect", connect)


def test_read_only_index_is_exit_1_with_a_message_and_search_without_refresh_works(env, capsys, monkeypatch, tmp_path):
    good_session(env)
    index_json(capsys)
    good_session(env, "good-2", word="okapi")
    _read_only_index(monkeypatch, tmp_path / "data" / "index.sqlite")
    code, out, err = run(capsys, "index", "--json")
    assert code == 1 and one_line_error(err) and "readonly" in err.replace("read-only", "readonly"), err
    assert search_ids(capsys, "pangolin", "--no-refresh") == ["good-1"]
    code, out, err = run(capsys, "status", "--json")
    assert code == 0 and json.loads(out)["sessions"] == 1


def test_search_on_a_read_only_index_answers_from_the_index_as_it_is(env, capsys, monkeypatch, tmp_path):
    good_session(env)
    index_json(capsys)
    good_session(env, "good-2", word="okapi")
    _read_only_index(monkeypatch, tmp_path / "data" / "index.sqlite")
    assert search_ids(capsys, "pangolin") == ["good-1"]


def test_data_dir_that_cannot_be_created_is_one_line_error(env, capsys, monkeypatch, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("SESAME_DATA_DIR", str(blocker / "data"))
    good_session(env)
    for argv in (["index"], ["search", "pangolin"]):
        code, _, err = run(capsys, *argv)
        assert code == 1 and one_line_error(err) and "data directory" in err, err


# -- kill -9 at random moments ------------------------------------------------------------------

QUERIES = ["return value", "socket thread lock", "the", "parser error", "pangolin", '"return the"', "encode*",
           "data -self"]


def _search_outputs(capsys):
    outs = []
    for q in QUERIES:
        code, out, err = run(capsys, "search", q, "--json", "--no-refresh", "--limit", "25")
        assert code == 0, err
        outs.append(out)
    return outs


def _results(capsys, queries):
    outs = []
    for q in queries:
        code, out, err = run(capsys, "search", q, "--json", "--no-refresh", "--limit", "40")
        assert code == 0, err
        outs.append(out)
    return outs


def _clean_build_results(capsys, monkeypatch, root, queries):
    """The same searches against an index built from scratch in another data dir."""
    data = os.environ["SESAME_DATA_DIR"]
    monkeypatch.setenv("SESAME_DATA_DIR", data + "-clean")
    try:
        shutil.rmtree(data + "-clean", ignore_errors=True)
        index_json(capsys)
        return _results(capsys, queries)
    finally:
        monkeypatch.setenv("SESAME_DATA_DIR", data)


@pytest.fixture(scope="module")
def fault_corpus(tmp_path_factory):
    """~200 pi sessions of ~90 KB (gen_corpus.py) plus one 12 MB session read in slices."""
    base = tmp_path_factory.mktemp("fault")
    v1 = base / "v1"
    if os.path.exists(GEN_CORPUS):
        subprocess.run([sys.executable, GEN_CORPUS, str(v1), "--sessions", "200", "--format", "pi", "--seed", "3"],
                       check=True, capture_output=True)
        root = v1 / "sessions"
    else:
        root = v1 / "sessions"
        rnd = random.Random(3)
        words = ("return value file path socket parser error self thread lock encode data the bytes "
                 "buffer module import class function").split()
        for i in range(200):
            w = PiWriter(root, "gen-%03d" % i, start="2026-01-%02dT10:00:00.000Z" % (i % 28 + 1))
            for j in range(60):
                w.user(" ".join(rnd.choice(words) for _ in range(120)))
            w.save()
    big = PiWriter(root, "big-session", start="2026-01-01T00:00:00.000Z")
    for j in range(1500):
        big.user("pangolin chapter %d %s" % (j, "the return value of the parser " * 250))
    big.save()
    return root


def _v2_changes(root):
    """An incremental update: appends, a rewrite, deletions, new files."""
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    for i, path in enumerate(files):
        if i % 3 == 0:
            with open(path, "a") as f:
                for j in range(30):
                    f.write(line({"type": "message", "timestamp": "2026-06-01T00:00:%02d.000Z" % (j % 60),
                                  "message": {"role": "user", "content": "appended %d: socket thread lock %s" % (j, "x" * 2000)}}))
        elif i % 17 == 0:
            os.remove(path)
        elif i % 19 == 0:
            w = PiWriter(os.path.dirname(os.path.dirname(path)), "rewritten-%d" % i)
            w.user("rewritten with parser error details " * 50)
            with open(path, "w") as f:
                for e in w.lines:
                    f.write(line(e))
    for i in range(40):
        w = PiWriter(root, "new-%03d" % i, start="2026-07-01T00:00:00.000Z")
        for j in range(40):
            w.user("new session %d encode the data buffer %s" % (i, "y " * 1000))
        w.save()


def _sesame_cmd(argv, small_batches):
    if not small_batches:
        return [sys.executable, SESAME] + argv
    # The default batch (64 MB) makes this corpus one transaction; small batches also kill between commits.
    code = ("import sys; sys.path.insert(0, %r); import sesame; sesame.BATCH_BYTES = 1 << 20; "
            "sys.exit(sesame.main(%r))" % (HERE, argv))
    return [sys.executable, "-c", code]


def _kill_trials(trials, fault_corpus, tmp_path, capsys, monkeypatch):
    rnd = random.Random(int(os.environ.get("SESAME_FAULT_SEED", "11")))
    work = tmp_path / "work"
    write_config({"sources": [{"parser": "pi", "path": str(work)}]}, tmp_path)
    data = tmp_path / "data"
    monkeypatch.setenv("SESAME_DATA_DIR", str(data))
    env = dict(os.environ)

    def fresh_v1():
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(fault_corpus, work)   # copy2 keeps mtimes: the v1 baseline sees them unchanged

    # Reference results: clean builds of v1 and v2, and a saved v1 index to start incremental runs from.
    fresh_v1()
    shutil.rmtree(data, ignore_errors=True)
    t0 = time.monotonic()
    index_json(capsys)
    full_seconds = time.monotonic() - t0
    ref_v1 = _search_outputs(capsys)
    baseline = tmp_path / "baseline"
    shutil.copytree(data, baseline)
    _v2_changes(work)
    t0 = time.monotonic()
    index_json(capsys)
    incr_seconds = time.monotonic() - t0
    # The reference for incremental runs is the same run uninterrupted: the sessions of the files v2
    # deleted are kept (marked deleted), which a clean build of v2 cannot know about.
    ref_v2 = _search_outputs(capsys)
    assert ref_v2 != ref_v1
    killed = 0
    for trial in range(trials):
        incremental = trial % 2 == 1
        small = trial % 4 in (2, 3)
        fresh_v1()
        shutil.rmtree(data, ignore_errors=True)
        if incremental:
            shutil.copytree(baseline, data)
            _v2_changes(work)
            argv, span = ["index"], incr_seconds
        else:
            argv, span = (["index", "--full"] if trial % 3 == 0 else ["index"]), full_seconds
            if argv == ["index", "--full"]:
                shutil.copytree(baseline, data)   # --full over an existing index
        delay = 0.1 + rnd.random() * (span * (1.5 if small else 0.9))   # + interpreter start-up
        p = subprocess.Popen(_sesame_cmd(argv, small), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        killed += p.returncode == -signal.SIGKILL
        # (Orphaned pool workers may print BrokenPipe tracebacks here: see FINDINGS.md.)
        code, out, err = run(capsys, "index", "--json")
        assert code == 0 and "Traceback" not in err, (trial, err)
        got = _search_outputs(capsys)
        want = ref_v2 if incremental else ref_v1
        for q, g, w in zip(QUERIES, got, want):
            assert g == w, "trial %d (%s, %s, killed after %.2fs): results for %r differ from a clean build" % (
                trial, "incremental" if incremental else "full", "small batches" if small else "default batches",
                delay, q)
    print("kill -9: %d trials, %d killed mid-run (full index %.2fs, incremental %.2fs)"
          % (trials, killed, full_seconds, incr_seconds))
    assert killed >= (trials + 1) // 2, "most kills should land mid-run; the corpus is too small"


@slow
def test_kill_9_during_full_and_incremental_index_then_index_equals_clean_build_quick(
        fault_corpus, tmp_path, capsys, monkeypatch, env):
    _kill_trials(3, fault_corpus, tmp_path, capsys, monkeypatch)


@pytest.mark.skipif(not os.environ.get("SESAME_FAULT_TRIALS"),
                    reason="opt-in: SESAME_FAULT_TRIALS=20 python3 -m pytest -q -k kill_9")
def test_kill_9_during_full_and_incremental_index_then_index_equals_clean_build_many(
        fault_corpus, tmp_path, capsys, monkeypatch, env):
    _kill_trials(int(os.environ.get("SESAME_FAULT_TRIALS") or 20), fault_corpus, tmp_path, capsys, monkeypatch)


# -------------------------------------------------------------------------------------------------
# Concurrency
# -------------------------------------------------------------------------------------------------

@slow
def test_search_while_indexing_always_answers(fault_corpus, tmp_path, capsys, monkeypatch, env):
    write_config({"sources": [{"parser": "pi", "path": str(fault_corpus)}]}, tmp_path)
    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "data"))
    p = subprocess.Popen([sys.executable, SESAME, "index"], env=dict(os.environ),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    answers = 0
    while p.poll() is None:
        code, out, err = run(capsys, "search", "return value", "--json")   # with refresh: must not wait
        assert code == 0 and "Traceback" not in err, err
        json.loads(out)
        answers += 1
    assert p.wait() == 0, p.stderr.read()
    assert answers >= 1
    code, out, err = run(capsys, "search", "pangolin", "--json")
    assert code == 0 and json.loads(out)["results"][0]["sessionId"] == "big-session"


@slow
def test_two_indexers_at_once_both_succeed_and_the_index_equals_a_clean_build(
        fault_corpus, tmp_path, capsys, monkeypatch, env):
    write_config({"sources": [{"parser": "pi", "path": str(fault_corpus)}]}, tmp_path)
    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "data"))
    procs = []
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, SESAME, "index", "--json"], env=dict(os.environ),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        time.sleep(0.3)   # the second starts while the first is indexing
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in err, err
        assert json.loads(out)["filesSkipped"] == 0
    assert "another sesame index is running; waiting" in outs[1][1]
    got = _search_outputs(capsys)
    want = _clean_build_results(capsys, monkeypatch, fault_corpus, QUERIES)
    for q, g, w in zip(QUERIES, got, want):
        if g != w:
            g, w = json.loads(g)["results"], json.loads(w)["results"]
            diff = [(i, a["sessionId"], a["score"], b["sessionId"], b["score"]) for i, (a, b) in enumerate(zip(g, w))
                    if a != b]
            assert not diff, "query %r differs from a clean build: %s" % (q, diff[:5])


def test_second_process_opening_a_new_index_does_not_wipe_what_the_first_indexed(env, capsys, tmp_path):
    for i in range(5):
        good_session(env, "race-%d" % i, word="ferret%d" % i)
    marker = tmp_path / "first-done"
    # Process B opens the (still missing) index and is paused right after its schema check, as a slow
    # process would be; process A (in-process here) builds the index meanwhile.
    code = ("import os, sys, time; sys.path.insert(0, %r); import sesame\n"
            "orig = sesame.Store.transaction\n"
            "state = []\n"
            "def paused(self):\n"
            "    if not state:\n"
            "        state.append(1)\n"
            "        open(%r + '.b-ready', 'w').close()\n"
            "        while not os.path.exists(%r): time.sleep(0.02)\n"
            "    return orig(self)\n"
            "sesame.Store.transaction = paused\n"
            "sys.exit(sesame.main(['index', '--json']))\n" % (HERE, str(marker), str(marker)))
    b = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not os.path.exists(str(marker) + ".b-ready") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert index_json(capsys)["filesIndexed"] == 5      # A
    marker.write_text("go")
    out, err = b.communicate(timeout=60)
    assert b.returncode == 0, err
    assert json.loads(out)["filesIndexed"] == 0          # B finds everything already indexed


def test_a_round_that_finds_nothing_to_read_leaves_the_index_lock_free(env, capsys):
    # `sesame watch` and every MCP server's background refresh compare every file each round; they
    # held the index lock while comparing, so another process's search that had an append to read
    # waited for it. Polled from here for a second beside `watch --interval 0.02` over 300 sessions:
    # the lock was taken in each round before (about a fifth of the polls found it held), never now;
    # an append is still indexed by the watch.
    import time
    for i in range(300):
        PiWriter(env, "quiet-%03d" % i).user("quiet session %d about otters" % i).save()
    assert run(capsys, "index")[0] == 0
    with watching(0.02) as w:
        time.sleep(2.5)   # (a folder changed in the last 2 s is recorded as unsettled, and listed again)
        lock, held, polls = sesame.IndexLock(os.environ["SESAME_DATA_DIR"]), 0, 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            polls += 1
            if lock.acquire(0):
                lock.release()
            else:
                held += 1
            time.sleep(0.002)
        assert polls > 100 and held == 0
        PiWriter(env, "quiet-007").user("quiet session 7 about otters").user("and a pangolin later").save()
        assert found_soon(capsys, "pangolin", pause=0.1) == ["quiet-007"]
    assert w.returncode == 0 and "Traceback" not in w.err


def test_a_round_is_skipped_when_another_compared_every_file_within_its_interval(env, capsys, tmp_path):
    # An agent runs one MCP server per session, each comparing every file every 30 s: the first
    # round since the last one made by any of them (or `watch`) compares, the others skip; a search
    # still reads what changed; other sources (another config) are not taken for looked at.
    import time
    PiWriter(env, "rnd-1").user("the first wombat").save()
    assert run(capsys, "index")[0] == 0

    def round_(every, elsewhere=False):
        """How many files a round compared, made in this process or in another one."""
        if elsewhere:
            code = ("import sys; sys.path.insert(0, %r); import sesame; ctx = sesame.Context(); store = ctx.store(); "
                    "print(sesame.refresh_index(ctx, store, wait_seconds=0, every=%r).seen)" % (HERE, every))
            r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            return int(r.stdout)
        return background_round(every=every).seen
    assert round_(30, elsewhere=True) == 1   # another server's round: compared
    PiWriter(env, "rnd-2").user("a second wombat").save()
    assert round_(30) == 0                   # skipped: another process compared every file a moment ago
    assert sorted(search_ids(capsys, "wombat")) == ["rnd-1", "rnd-2"]   # (the search's own refresh)
    time.sleep(0.25)
    assert round_(0.2) == 2                  # its interval has passed since the other's
    assert round_(30) == 2                   # (its own round is not taken for another's)
    assert round_(30, elsewhere=True) == 0   # and the other skips its round now
    looked = os.path.join(os.environ["SESAME_DATA_DIR"], "looked")
    assert open(looked).read().endswith("\n%d" % os.getpid())
    with open(looked, "a") as f:
        f.write("0")   # (as if another process had written it)
    ahead = time.time() + 3600
    os.utime(looked, (ahead, ahead))          # written "in an hour": the clock was set back since
    assert round_(30) == 2                    # not taken for a round a moment ago
    other = tmp_path / "other-pi"
    PiWriter(other, "rnd-3").user("a third wombat").save()
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "pi", "path": str(other)}]}, tmp_path)
    assert round_(30, elsewhere=True) == 3   # other sources: compared, the new one read
    PiWriter(other, "rnd-4").user("a fourth wombat").save()
    write_config({"sources": [{"parser": "pi", "path": str(env)}]}, tmp_path)
    assert round_(30) == 2                   # (the other's round looked at other sources)


def test_a_round_reads_what_its_look_found_as_it_is_once_it_has_the_lock(env, capsys, monkeypatch):
    # The round's look (no lock) finds an append to A and a new session C; before it has the lock, a
    # search (another process) reads both, and the agent appends again to A. Under the lock the round reads A's second
    # append, and leaves C, which the search indexed (taken for new, it was written twice).
    a = PiWriter(env, "lk-a").user("the first okapi note")
    a.save()
    run(capsys, "index")
    a.user("then a narwhal note")
    a.save()
    PiWriter(env, "lk-c").user("a new quokka session").save()
    real = sesame.IndexLock.acquire
    meanwhile = []

    def acquire(self, wait_seconds):
        if not meanwhile:
            r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "search", "quokka", "--json"],
                               env=dict(os.environ), capture_output=True, text=True)   # (its refresh reads A and C)
            meanwhile.append([x["sessionId"] for x in json.loads(r.stdout)["results"]])
            a.user("and a tapir note at last")
            a.save()
        return real(self, wait_seconds)
    monkeypatch.setattr(sesame.IndexLock, "acquire", acquire)
    ctx = sesame.Context()
    store = ctx.store()
    try:
        summary = sesame.refresh_index(ctx, store, wait_seconds=0)   # a `watch` round
    finally:
        store.close()
    assert meanwhile == [["lk-c"]]
    assert summary is not None and summary.indexed == 1 and not summary.problems
    for word, sid in (("okapi", "lk-a"), ("narwhal", "lk-a"), ("tapir", "lk-a"), ("quokka", "lk-c")):
        assert search_ids(capsys, word, "--no-refresh") == [sid]
    code, out, _ = run(capsys, "show", "lk-a", "--json")
    assert [c["text"] for c in json.loads(out)["chunks"]] == ["the first okapi note", "then a narwhal note",
                                                                "and a tapir note at last"]


@slow
def test_watch_beside_a_manual_index_loses_no_update(corpus, capsys):
    with watching(0.05) as w:
        for i in range(8):
            PiWriter(corpus, "both-%d" % i).user("gazelle number %d" % i).save()
            r = subprocess.run([sys.executable, os.path.join(HERE, "sesame.py"), "index"], env=dict(os.environ),
                               capture_output=True, text=True)
            assert r.returncode == 0 and "Traceback" not in r.stderr
    assert w.returncode == 0 and "Traceback" not in w.err
    run(capsys, "index")
    assert sorted(search_ids(capsys, "gazelle", "--limit", "20", "--max-chars", "0")) == ["both-%d" % i for i in range(8)]


def test_hostile_disk_everything_at_once(env, tmp_path, capsys, monkeypatch):
    """A pi and a Claude Code source holding every kind of trouble at once: odd names, damaged files,
    deep JSON, escape sequences, secrets, symlink loops, unreadable folders. Every good session is
    found, no secret reaches the index files, nothing raw reaches the terminal."""
    claude = tmp_path / "claude-projects"
    write_config({"sources": [{"parser": "pi", "path": str(env)}, {"parser": "claude", "path": str(claude)}]}, tmp_path)
    secrets = {"aws": AWS, "github": GH_PAT, "password": "hunter2-" + "Zq8vLm3x", "openai": OPENAI, "slack": SLACK}
    found = {}   # a word only one good session has -> that session

    def pi_session(sid, word, *extra, cwd="/home/dev/proj", folder=None):
        w = PiWriter(folder or env, sid, cwd=cwd)
        w.user("the %s session %s" % (word, " ".join(extra)))
        w.tool("bash", {"command": "deploy"}, "deploy output for %s %s" % (word, " ".join(extra)))
        w.assistant("done with the %s" % word)
        found[word] = sid
        return w

    pi_session("hd-plain", "aardvark").save()
    pi_session("hd-escapes", "bandicoot", ESCAPES, cwd="/home/dev/\x1b[2Jesc").save()
    pi_session("hd-secrets", "chinchilla", "AWS_ACCESS_KEY_ID=%s token %s" % (secrets["aws"], secrets["github"]),
               "password=%s and %s, slack %s" % (secrets["password"], secrets["openai"], secrets["slack"])).save()
    pi_session("hd-deep", "dugong").save(extra="[" * 100000 + "\n" + '{"a": ' * 50000 + "\n")
    w = pi_session("hd-odd", "echidna", cwd="/home/dev/odd")
    odd = os.path.join(str(env), "--home-dev-odd\xff--").encode("utf-8", "surrogateescape")
    os.makedirs(odd)
    with open(os.path.join(odd, b"odd_\xff\xfe.jsonl"), "w") as f:
        f.writelines(line(e) for e in w.lines)
    hidden = pi_session("hd-hidden", "ferret", cwd="/home/dev/locked").save()   # its folder becomes unreadable
    breaks = pi_session("hd-breaks", "gerbil", cwd="/home/dev/\x1b]0;title\x07proj").save()   # damaged later
    folder = env / "--home-dev-proj--"
    (folder / "garbage.jsonl").write_bytes(bytes(random.Random(7).getrandbits(8) for _ in range(50000)))
    (folder / "truncated.jsonl").write_bytes(b'{"type": "session", "id": "trunc", "cwd": "/x", "timestamp": "2026')
    (folder / "empty.jsonl").write_bytes(b"")
    os.symlink(str(env), str(folder / "loop"))
    os.symlink(str(folder / "self.jsonl"), str(folder / "self.jsonl"))
    os.symlink(str(env), str(env / "--root-loop--"))

    def claude_session(sid, word, *extra, cwd="/home/u/proj"):
        recs = [{"type": "user", "uuid": sid + "-u1", "sessionId": sid, "cwd": cwd, "timestamp": "2026-01-21T06:19:38Z",
                 "isSidechain": False, "message": {"role": "user", "content": "the %s question %s" % (word, " ".join(extra))}},
                {"type": "assistant", "uuid": sid + "-a1", "sessionId": sid, "cwd": cwd, "isSidechain": False,
                 "timestamp": "2026-01-21T06:19:40Z", "message": {"id": "msg_" + sid, "role": "assistant",
                                                                 "content": [{"type": "text", "text": "the %s answer" % word}]}}]
        found[word] = sid
        return write_jsonl(claude / ("-home-u-" + word) / (sid + ".jsonl"), recs)

    claude_session("c0000000-0000-4000-8000-000000000001", "hyena")
    claude_session("c0000000-0000-4000-8000-000000000002", "impala", ESCAPES, "export GITHUB_TOKEN=%s" % secrets["github"],
                   "password=%s" % secrets["password"])
    deep = claude_session("c0000000-0000-4000-8000-000000000003", "jackal")
    with open(deep, "a") as f:
        f.write("[" * 100000 + "\n")
    odd_claude = os.path.join(str(claude), "-home-u-odd").encode() + b"\xfe"
    os.makedirs(odd_claude)
    shutil.copy(claude_session("c0000000-0000-4000-8000-000000000004", "koala"),
                os.path.join(odd_claude, b"c0000000-0000-4000-8000-000000000004.jsonl"))
    shutil.rmtree(str(claude / "-home-u-koala"))
    (claude / "-home-u-garbage").mkdir()
    (claude / "-home-u-garbage" / "c0000000-0000-4000-8000-00000000dead.jsonl").write_bytes(b"\x00\xff garbage\n" * 100)
    os.symlink(str(claude), str(claude / "-home-u-loop"))

    code, out, err = run(capsys, "index", "--json")
    assert code == 0 and "Traceback" not in err, err
    summary = json.loads(out)
    assert summary["sessions"] == len(found) and summary["linesSkipped"] >= 3, summary
    assert {"garbage.jsonl", "truncated.jsonl", "c0000000-0000-4000-8000-00000000dead.jsonl"} <= {
        os.path.basename(p["path"]) for p in summary["skipped"]}, summary["skipped"]
    with open(breaks, "wb") as f:   # an indexed file that is damaged afterwards keeps its sessions
        f.write(b"\x00garbage that is not a session\n")
    with monkeypatch.context() as m:
        _deny(m, os.path.dirname(hidden))   # an unreadable folder: what was indexed from it stays
        code, out, err = run(capsys, "index", "--json")
        assert code == 0 and "Traceback" not in err, err
        reasons = {p["path"]: p["reason"] for p in json.loads(out)["skipped"]}
        assert "Permission denied" in reasons.get(os.path.dirname(hidden), ""), reasons
        assert "damaged" in reasons.get(breaks, ""), reasons
        for word, sid in found.items():
            assert search_ids(capsys, word, "--no-refresh") == [sid], word
            code, out, err = run(capsys, "search", word)
            assert code == 0 and not RAW_CONTROL.search(out + err), (word, out, err)
            code, out, err = run(capsys, "search", word, "--json")
            assert code == 0 and [r["sessionId"] for r in json.loads(out)["results"]] == [sid]
            assert not RAW_CONTROL.search(out.rstrip("\n"))
        for ref in ("hd-escapes", "c0000000-0000-4000-8000-000000000002", "hd-breaks"):
            code, out, err = run(capsys, "show", ref, "--all")
            assert code == 0 and not RAW_CONTROL.search(out + err), (ref, out, err)
        code, out, err = run(capsys, "status")
        assert code == 0 and "damaged" in out and not RAW_CONTROL.search(out + err), (out, err)
        assert json.loads(run(capsys, "status", "--json")[1])["sessions"] == len(found)
        assert mcp_call("search", {"query": "bandicoot"})["isError"] is False
    raw = index_file_bytes(tmp_path)
    texts = index_bytes(tmp_path)[0]
    for kind, value in secrets.items():
        assert value.encode() not in raw and value not in texts, kind


# ==================================================================================================
# Relevance v2: seven ways people remember a session
# Our own held-back-style set (the tracker's ranking issue): 12 queries in each of 7 classes (three batches), each
# with its own target session and look-alike decoys, hidden among ~300 ordinary sessions. Rendered in
# pi, Claude Code and Codex layouts by ../shared/relevance/render.py (the public set's renderer).
# `SESAME_RELEVANCE=1 python3 -m pytest -q -s -k relevance_v2_report` prints hit@1, hit@3 and MRR
# per class; test_relevance_v2_meets_target holds the line (hit@1 >= 90%, no empty result).
# ==================================================================================================

RV_SESSIONS = []


def rv(id, cwd, start, turns, name=None):
    RV_SESSIONS.append(dict(id="rv-" + id, cwd=cwd, start=start, turns=turns, name=name))


def rU(text):
    return ("user", text)


def rA(text, *tools):
    return ("assistant", text, list(tools))


def rB(command, output):
    return ("bash", {"command": command}, output)


def rE(path, old, new):
    return ("edit", {"path": path, "oldText": old, "newText": new}, "")


def rW(path, content):
    return ("write", {"path": path, "content": content}, "")


# Ordinary working talk, used to make the "detail" sessions long: the fact asked about is said once,
# in the middle of 40+ messages about other things.
RV_FILLER = [
    ("Run the unit tests again.", "All 212 tests pass; two are skipped on this platform."),
    ("Can you tidy up the imports in that module?", "Sorted the imports and removed three unused ones."),
    ("What does the linter say now?", "No warnings left except a long line in the fixtures."),
    ("Let's rename the helper to something clearer.", "Renamed it and updated the four call sites."),
    ("Add a docstring there.", "Added a short docstring explaining the arguments and the return value."),
    ("Is the changelog up to date?", "Added an entry under Unreleased describing the change."),
    ("Check the type hints.", "mypy is clean after adding two Optional annotations."),
    ("Commit what we have.", "Committed with the message 'wip: refactor config loading'."),
    ("Why is that function so long?", "It mixes parsing and validation; I split validation into its own function."),
    ("Show me the diff.", "The diff touches three files, mostly moving code without changing it."),
    ("Bump the patch version.", "Bumped the version to the next patch release in the package metadata."),
    ("Format everything.", "Ran the formatter; twelve files changed, whitespace only."),
    ("Any TODOs left in this area?", "Two TODOs remain, both about error messages; I left them for later."),
    ("Make the error message friendlier.", "The message now says which field was missing and how to fix it."),
    ("Let's push the branch.", "Pushed the branch and opened a draft pull request."),
    ("Review the README section we touched.", "Clarified the installation steps and fixed a broken link."),
]


def rv_long(before, fact_user, fact_assistant, after, n_fill=22):
    """A long session: `before` turns, filler, the fact once in the middle, more filler, `after`."""
    turns = list(before)
    for i in range(n_fill):
        u, a = RV_FILLER[i % len(RV_FILLER)]
        turns += [rU(u), rA(a)]
        if i == n_fill // 2:
            turns += [rU(fact_user), rA(fact_assistant)]
    return turns + list(after)


# 1. paraphrase: the user's words differ from the session's
rv("cls", "/home/lee/code/storefront", "2026-03-02T10:00:00Z", [
    rU("Lighthouse reports a cumulative layout shift of 0.34 on the product page."),
    rA("The hero image and the price badge have no reserved size, so content moves when they arrive. I'll set width and height and reserve space for the badge.",
       rE("src/components/Hero.tsx", '<img src={hero} />', '<img src={hero} width={1200} height={600} />')),
    rU("Also the web font swap moves the headline."),
    rA("Added font-display: optional and a size-adjusted fallback so the headline keeps its box. CLS is now 0.02."),
])
rv("x-slow-page", "/home/lee/code/storefront", "2026-03-05T10:00:00Z", [
    rU("The category page loads slowly, time to first byte is two seconds."),
    rA("The server renders all 400 products; I added pagination and caching of the category query."),
])
rv("docker-slim", "/home/lee/code/api", "2026-02-11T09:00:00Z", [
    rU("Our API image is 1.9 GB, pulls take forever on the build agents."),
    rA("Switching to a multi-stage build: compile in a builder stage, copy only the wheels and the app into python:3.12-slim.",
       rW("Dockerfile", "FROM python:3.12 AS builder\nRUN pip wheel -w /wheels -r requirements.txt\nFROM python:3.12-slim\nCOPY --from=builder /wheels /wheels")),
    rU("Anything else we can drop?"),
    rA("Removed the apt cache and the test dependencies from the final layer; the image is 210 MB now."),
])
rv("x-compose-net", "/home/lee/code/api", "2026-02-14T09:00:00Z", [
    rU("The api container cannot reach postgres in docker compose."),
    rA("They were on different networks; I put both services on the backend network."),
])
rv("flaky-race", "/home/lee/code/webapp", "2026-04-03T14:00:00Z", [
    rU("test_checkout_total fails maybe one run in five on CI, passes locally."),
    rA("It asserts before the cart update promise resolves. The race is in the test: it does not await updateCart().",
       rE("tests/checkout.test.ts", "updateCart(item)", "await updateCart(item)")),
    rU("Run it a hundred times to be sure."),
    rA("100 runs in a loop, no failure. The intermittent failure was the missing await."),
])
rv("x-env-missing", "/home/lee/code/webapp", "2026-04-05T14:00:00Z", [
    rU("All tests fail on CI with STRIPE_KEY undefined."),
    rA("The CI job did not export the variable; I added it to the workflow secrets."),
])
rv("auth-persist", "/home/lee/code/webapp", "2026-04-10T11:00:00Z", [
    rU("After a reload users are logged out again."),
    rA("The access token only lives in React state. I'm persisting the refresh token in an httpOnly cookie and restoring the session on boot via /api/session.",
       rE("src/auth/session.ts", "let token = null", "const token = await restoreSession()")),
    rU("Does it survive closing the browser?"),
    rA("Yes, the cookie has a 30 day max-age and the session is restored on load."),
])
rv("x-login-validate", "/home/lee/code/webapp", "2026-04-12T11:00:00Z", [
    rU("The login form accepts an empty password."),
    rA("Added validation for required fields and an error message under the input."),
])
rv("slow-queries", "/home/lee/code/orders-service", "2026-01-20T16:00:00Z", [
    rU("Listing a customer's orders takes 4 seconds."),
    rA("EXPLAIN ANALYZE shows a sequential scan on orders. Adding an index on orders(customer_id, created_at).",
       rB("psql -c 'EXPLAIN ANALYZE SELECT * FROM orders WHERE customer_id = 42'", "Seq Scan on orders  (cost=0.00..48213.00 rows=37 width=120) (actual time=3981.2..3992.8 rows=37 loops=1)")),
    rA("After the index: Index Scan, 1.3 ms."),
])
rv("x-rename-column", "/home/lee/code/orders-service", "2026-01-22T16:00:00Z", [
    rU("Rename the column custid to customer_id in the orders table."),
    rA("Wrote a migration that renames the column and updates the ORM model."),
])
rv("secret-scan", "/home/lee/code/infra", "2026-05-02T10:00:00Z", [
    rU("Someone committed an AWS key last month. How do we prevent that?"),
    rA("Adding gitleaks as a pre-commit hook and in CI, moving local settings to .env which is now in .gitignore.",
       rW(".pre-commit-config.yaml", "repos:\n  - repo: https://github.com/gitleaks/gitleaks\n    hooks:\n      - id: gitleaks")),
    rA("The hook blocks commits that contain credentials; the CI job fails the pull request too."),
])
rv("x-readme-badges", "/home/lee/code/infra", "2026-05-04T10:00:00Z", [
    rU("Add build status badges to the repo README."),
    rA("Added the CI badge and the coverage badge at the top of the README."),
])
rv("responsive", "/home/lee/code/landing", "2026-03-15T09:30:00Z", [
    rU("On an iPhone the pricing table overflows and you have to scroll sideways."),
    rA("Added the viewport meta tag and media queries: below 640px the pricing columns stack vertically.",
       rE("styles/pricing.css", ".plans { display: flex; }", ".plans { display: flex; }\n@media (max-width: 640px) { .plans { flex-direction: column; } }")),
])
rv("x-push-notif", "/home/lee/code/mobile-app", "2026-03-16T09:30:00Z", [
    rU("Push notifications do not arrive on Android."),
    rA("The FCM server key was rotated; updated it and notifications arrive again."),
])
rv("mem-leak", "/home/lee/code/chat-server", "2026-02-25T13:00:00Z", [
    rU("The node process grows to 3 GB RSS after about a day and gets killed."),
    rA("Heap snapshots show thousands of socket listeners: every reconnect adds a 'message' listener that is never removed. Removing it on disconnect.",
       rE("src/hub.js", "socket.on('message', relay)", "socket.on('message', relay)\nsocket.once('close', () => socket.off('message', relay))")),
    rA("Memory is flat at 180 MB over a 12 hour soak test."),
])
rv("x-port-in-use", "/home/lee/code/chat-server", "2026-02-27T13:00:00Z", [
    rU("The server crashes on start."),
    rA("Another instance was still running on the same port; killed it and added a clear error message."),
])

# 2. identifier: part of a camelCase, snake_case, kebab-case or dotted name
rv("stripe-hook", "/home/lee/code/shop", "2026-03-08T10:00:00Z", [
    rU("Wire up the stripe events for successful charges."),
    rA("Added the handler and registered it for the events we care about.",
       rW("src/webhooks/stripe.ts", "export async function handlePaymentIntentWebhook(event: Stripe.Event) {\n  if (event.type === 'payment_intent.succeeded') await markPaid(event.data.object.id)\n}")),
])
rv("x-github-hook", "/home/lee/code/shop", "2026-03-09T10:00:00Z", [
    rU("Verify the signature of the GitHub webhook before processing it."),
    rA("The webhook handler now checks the X-Hub-Signature-256 header against the secret."),
])
rv("retry-budget", "/home/lee/code/gateway", "2026-04-20T15:00:00Z", [
    rU("Upstream calls retry forever when the backend is down."),
    rA("Added a per-request limit on total retry time.",
       rE("config/gateway.yaml", "retries: 5", "retries: 5\nretry_budget_ms: 1500")),
    rA("With retry_budget_ms the gateway gives up after 1.5 s and returns 503."),
])
rv("x-backoff", "/home/lee/code/gateway", "2026-04-21T15:00:00Z", [
    rU("Make the retries back off exponentially."),
    rA("Retries now wait 100ms, 200ms, 400ms with jitter."),
])
rv("email-idx", "/home/lee/code/accounts", "2026-01-12T12:00:00Z", [
    rU("Signups are slow when checking whether the address is taken."),
    rA("Adding a unique index for the lookup.",
       rW("migrations/0031_users_email.sql", "CREATE UNIQUE INDEX users_email_idx ON users (lower(email));")),
])
rv("x-email-templates", "/home/lee/code/accounts", "2026-01-14T12:00:00Z", [
    rU("Redesign the welcome email template for new users."),
    rA("Rewrote the welcome template with the new brand colours."),
])
rv("rate-limit-mw", "/home/lee/code/gateway", "2026-05-06T10:00:00Z", [
    rU("Bots hammer the login endpoint."),
    rA("Added a token bucket per IP in front of the auth routes.",
       rW("src/middleware/rateLimiterMiddleware.ts", "export const rateLimiterMiddleware = tokenBucket({ capacity: 10, refillPerSecond: 1 })")),
])
rv("x-logging-mw", "/home/lee/code/gateway", "2026-05-07T10:00:00Z", [
    rU("Log every request with its duration."),
    rA("Added a middleware that logs method, path, status and duration."),
])
rv("profile-hook", "/home/lee/code/webapp", "2026-02-02T10:00:00Z", [
    rU("Several components load the same user data separately."),
    rA("Extracted a shared hook with caching.",
       rW("src/hooks/useFetchUserProfile.ts", "export function useFetchUserProfile(userId: string) {\n  return useQuery(['profile', userId], () => api.get(`/users/${userId}`))\n}")),
])
rv("x-profile-css", "/home/lee/code/webapp", "2026-02-03T10:00:00Z", [
    rU("The avatar on the user profile page is stretched."),
    rA("Set object-fit: cover on the avatar image."),
])
rv("pool-size", "/home/lee/code/orders-service", "2026-03-22T10:00:00Z", [
    rU("We hit 'too many clients' on postgres during the sale."),
    rA("Each worker opened its own pool. Made the size configurable and lowered it.",
       rE("settings.py", "POOL = 20", "MAX_CONNECTION_POOL_SIZE = int(os.environ.get('MAX_CONNECTION_POOL_SIZE', 5))")),
])
rv("x-conn-timeout", "/home/lee/code/orders-service", "2026-03-23T10:00:00Z", [
    rU("Database connections time out after the VPN reconnects."),
    rA("Enabled TCP keepalives and a connect timeout of 5 seconds."),
])
rv("cents-rounding", "/home/lee/code/billing", "2026-02-18T10:00:00Z", [
    rU("Invoices are off by one cent sometimes."),
    rA("Totals were summed as floats. Storing money as integers now.",
       rE("billing/models.py", "total = sum(l.price for l in lines)", "order.total_cents = sum(l.price_cents for l in lines)")),
])
rv("x-orders-pagination", "/home/lee/code/billing", "2026-02-19T10:00:00Z", [
    rU("The orders list page loads all orders at once."),
    rA("Added pagination with 50 orders per page."),
])
rv("json-util", "/home/lee/code/cli-tool", "2026-04-25T10:00:00Z", [
    rU("The client crashes on empty bodies from the API."),
    rA("Centralised response decoding in one helper that tolerates empty bodies.",
       rW("src/http/parseJSONResponse.ts", "export async function parseJSONResponse(res: Response) {\n  const text = await res.text()\n  return text ? JSON.parse(text) : null\n}")),
])
rv("x-json-schema", "/home/lee/code/cli-tool", "2026-04-26T10:00:00Z", [
    rU("Validate the config file against a JSON schema."),
    rA("Added schema validation with clear error messages."),
])

# 3. typo: one or two misspelt words
rv("k8s-ingress", "/home/lee/ops/cluster", "2026-02-06T10:00:00Z", [
    rU("Uploads over a minute fail with 504 through the kubernetes ingress."),
    rA("The nginx ingress controller closes the upstream after 60 seconds. Raised proxy-read-timeout and proxy-send-timeout to 600 in the ingress annotations.",
       rE("k8s/ingress.yaml", "annotations:", "annotations:\n    nginx.ingress.kubernetes.io/proxy-read-timeout: '600'")),
])
rv("x-crashloop", "/home/lee/ops/cluster", "2026-02-08T10:00:00Z", [
    rU("A kubernetes pod is in CrashLoopBackOff."),
    rA("The liveness probe hit the wrong port; fixed the probe."),
])
rv("pg-pool", "/home/lee/code/reports", "2026-03-12T10:00:00Z", [
    rU("The report service exhausts postgres connections."),
    rA("Reports opened a connection per query. Using a shared connection pool (psycopg_pool) with max 10 connections now."),
])
rv("x-mysql-pool", "/home/lee/code/legacy", "2026-03-13T10:00:00Z", [
    rU("Tune the MySQL connection settings of the legacy app."),
    rA("Raised max_connections and set wait_timeout to 300."),
])
rv("es-mapping", "/home/lee/code/search-api", "2026-04-08T10:00:00Z", [
    rU("Indexing fails with mapper_parsing_exception for the price field."),
    rA("Elasticsearch inferred a long for price from the first document; later documents have decimals. Defined an explicit mapping with scaled_float and reindexed."),
])
rv("x-es-health", "/home/lee/code/search-api", "2026-04-09T10:00:00Z", [
    rU("The elasticsearch cluster health is yellow."),
    rA("Replicas could not be allocated on a single node; set replicas to 0 for the dev cluster."),
])
rv("webpack-size", "/home/lee/code/dashboard", "2026-01-28T10:00:00Z", [
    rU("The main bundle is 4 MB."),
    rA("webpack-bundle-analyzer shows moment locales and all of lodash. Switched to date-fns and lodash-es with tree shaking; the bundle is 900 KB."),
])
rv("x-vite-config", "/home/lee/code/dashboard", "2026-01-30T10:00:00Z", [
    rU("Move the dashboard from webpack to vite?"),
    rA("Not now; listed what the migration would take."),
])
rv("tf-drift", "/home/lee/ops/terraform", "2026-05-12T10:00:00Z", [
    rU("terraform plan wants to change the security group although nobody touched it."),
    rA("Someone edited the rules in the console: state drift. Imported the manual rule and added it to the module so plan is clean."),
])
rv("x-tf-modules", "/home/lee/ops/terraform", "2026-05-14T10:00:00Z", [
    rU("Pin the terraform module versions."),
    rA("Pinned every module source to a tag."),
])
rv("redis-invalidate", "/home/lee/code/catalog", "2026-02-21T10:00:00Z", [
    rU("Product prices stay stale for an hour after an update."),
    rA("The cache key is never invalidated. Deleting the redis key on every price update and publishing an invalidation event for the other instances."),
])
rv("x-redis-pubsub", "/home/lee/code/catalog", "2026-02-22T10:00:00Z", [
    rU("Use redis pub/sub for live stock updates."),
    rA("Added a publisher in the stock service and a subscriber in the web app."),
])
rv("gql-subs", "/home/lee/code/chat-web", "2026-03-27T10:00:00Z", [
    rU("New messages should appear without reloading."),
    rA("Added a GraphQL subscription over websocket using graphql-ws; the client subscribes to messageAdded per room."),
])
rv("x-gql-batch", "/home/lee/code/chat-web", "2026-03-28T10:00:00Z", [
    rU("Too many graphql queries on the rooms page."),
    rA("Batched the queries with a dataloader."),
])
rv("nginx-cert", "/home/lee/ops/edge", "2026-04-29T10:00:00Z", [
    rU("Browsers say the certificate expired for the status page."),
    rA("certbot renewal failed because nginx blocked the http-01 challenge path. Allowed /.well-known/acme-challenge and renewed; added a renew timer."),
])
rv("x-nginx-proxy", "/home/lee/ops/edge", "2026-04-30T10:00:00Z", [
    rU("Set up nginx as a reverse proxy for the blog."),
    rA("Added a server block proxying to port 2368."),
])

# 4. detail: a small fact from deep inside a long session
rv("grafana-port", "/home/lee/ops/monitoring", "2026-01-10T09:00:00Z", rv_long(
    [rU("Let's set up monitoring for the new cluster: prometheus, alertmanager and dashboards."),
     rA("Installing the kube-prometheus stack and wiring the alert routes.")],
    "The dashboard port clashes with the docs server.", "Moved grafana to port 3300 so both can run.",
    [rU("Good, wrap it up."), rA("Monitoring is deployed with alerts routed to the on-call channel.")]))
rv("x-grafana-default", "/home/lee/ops/monitoring", "2026-01-12T09:00:00Z", [
    rU("Open grafana locally."), rA("It runs on the default port 3000 with admin/admin on first login.")])
rv("protobuf-pin", "/home/lee/code/grpc-services", "2026-02-01T09:00:00Z", rv_long(
    [rU("Split the inventory service into gRPC services."), rA("Defining the protos and generating stubs.")],
    "The generated code breaks with the newest protobuf runtime.", "Pinned protobuf==4.25.3 in requirements until the generator catches up.",
    [rU("Ship it."), rA("The services build and the integration tests pass.")]))
rv("x-proto-schema", "/home/lee/code/grpc-services", "2026-02-03T09:00:00Z", [
    rU("Add a field to the protobuf schema for stock reservations."), rA("Added reserved_until as field 7.")])
rv("breaker-priya", "/home/lee/code/payments", "2026-03-04T09:00:00Z", rv_long(
    [rU("The payment provider is flaky this week; let's harden the client."), rA("Adding timeouts and better error handling.")],
    "Priya suggested we stop calling the provider for a while after repeated failures.",
    "Good idea: a circuit breaker around the payment client, opening after 5 failures for 30 seconds, as Priya suggested.",
    [rU("Done for today."), rA("Summary: timeouts, retries with budget, and the breaker.")]))
rv("x-breaker-impl", "/home/lee/code/payments-lib", "2026-03-06T09:00:00Z", [
    rU("Implement a generic circuit breaker class."), rA("Added CircuitBreaker with closed, open and half-open states.")])
rv("healthcheck-timeout", "/home/lee/code/api", "2026-03-18T09:00:00Z", rv_long(
    [rU("Deploys roll back randomly on the new platform."), rA("Looking at the deployment events and probes.")],
    "The health check gives up too early while migrations run.", "Set the healthcheck timeout to 7s and the start period to 60s.",
    [rU("Deploy again."), rA("The deploy went through without a rollback.")]))
rv("x-healthcheck-endpoint", "/home/lee/code/api", "2026-03-19T09:00:00Z", [
    rU("Add a /healthz endpoint."), rA("It returns 200 with the build version and database status.")])
rv("nightly-bucket", "/home/lee/code/exporter", "2026-04-14T09:00:00Z", rv_long(
    [rU("Build the nightly export of orders to parquet."), rA("Writing the export job and the schema.")],
    "Where should the files go?", "They go to the acme-nightly-exports-eu bucket with a 30 day lifecycle rule.",
    [rU("Schedule it."), rA("The job runs nightly from the scheduler.")]))
rv("x-bucket-other", "/home/lee/code/exporter", "2026-04-16T09:00:00Z", [
    rU("Upload the test fixtures to s3."), rA("Uploaded them to the acme-test-fixtures bucket.")])
rv("cleanup-cron", "/home/lee/code/jobs", "2026-05-20T09:00:00Z", rv_long(
    [rU("Write a job that deletes expired sessions and temp files."), rA("Implementing the cleanup job with a dry run mode.")],
    "When should it run so it doesn't collide with backups?", "Scheduled the cleanup job as 17 3 * * * to stay clear of the 2am backups.",
    [rU("Enable it in production."), rA("Enabled; the first run deleted 41k expired rows.")]))
rv("x-cron-syntax", "/home/lee/code/jobs", "2026-05-21T09:00:00Z", [
    rU("What is the cron syntax for every five minutes?"), rA("*/5 * * * *")])
rv("node-downgrade", "/home/lee/code/legacy-frontend", "2026-01-05T09:00:00Z", rv_long(
    [rU("Get the old frontend building again."), rA("Updating the build scripts and the lockfile.")],
    "node-sass fails to compile with the current node.", "Downgraded to node 18.19 via .nvmrc; node-sass builds again.",
    [rU("Good enough for now."), rA("The frontend builds and serves locally.")]))
rv("x-node-upgrade", "/home/lee/code/api-gateway", "2026-01-07T09:00:00Z", [
    rU("Upgrade the gateway to node 22."), rA("Upgraded and replaced two deprecated APIs.")])
rv("checkout-flag", "/home/lee/code/shop", "2026-04-22T09:00:00Z", rv_long(
    [rU("Rebuild the checkout flow with the new design."), rA("Starting with the cart summary and the address form.")],
    "How do we release it safely?", "The new checkout is behind the checkout_v2_enabled flag, on for 5% of users.",
    [rU("Ready for review."), rA("Opened the pull request with screenshots.")]))
rv("x-flags-lib", "/home/lee/code/shop", "2026-04-24T09:00:00Z", [
    rU("Which feature flag library should we use?"), rA("Compared three libraries; recommended the open-source one with local evaluation.")])

# 5. tool output: an error seen only in a command's output
rv("ossl", "/home/lee/code/legacy-frontend", "2026-02-09T09:00:00Z", [
    rU("npm run build fails after the node upgrade."),
    rA("Running it to see the error.", rB("npm run build", "Error: error:0308010C:digital envelope routines::unsupported\n    at new Hash (node:internal/crypto/hash:69:19) {\n  opensslErrorStack: [ 'error:03000086:digital envelope routines::initialization error' ],\n  library: 'digital envelope routines',\n  code: 'ERR_OSSL_EVP_UNSUPPORTED'\n}")),
    rA("Webpack 4 uses md4, which OpenSSL 3 disables. Set NODE_OPTIONS=--openssl-legacy-provider in the build script."),
])
rv("x-openssl-cert", "/home/lee/ops/edge", "2026-02-10T09:00:00Z", [
    rU("Generate a self-signed certificate with openssl for local https."),
    rA("Generated it.", rB("openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 365 -subj /CN=localhost", "writing new private key to 'key.pem'")),
])
rv("oom137", "/home/lee/code/ml-pipeline", "2026-03-25T09:00:00Z", [
    rU("The training container dies without any error."),
    rA("Checking the container.", rB("docker run --memory 4g trainer:latest python train.py; echo $?", "Loading dataset...\nBuilding vocabulary...\nKilled\nexit status 137")),
    rA("It is the OOM killer: the vocabulary build holds everything in memory. Streaming the dataset in chunks fixed it."),
])
rv("x-lint-exit1", "/home/lee/code/ml-pipeline", "2026-03-26T09:00:00Z", [
    rU("The lint step fails."),
    rA("Running it.", rB("ruff check .", "train.py:12:1: F401 'os' imported but unused\nFound 1 error.\nexit status 1")),
])
rv("eaddrinuse", "/home/lee/code/dashboard", "2026-04-01T09:00:00Z", [
    rU("The dev server does not start."),
    rA("Starting it to see why.", rB("npm run dev", "failed to start server. error:\nError: listen EADDRINUSE: address already in use :::5173\n    at Server.setupListenHandle [as _listen2] (node:net:1872:16)")),
    rA("A zombie vite process holds the port; killed it and set strictPort with a clear message."),
])
rv("x-port-config", "/home/lee/code/dashboard", "2026-04-02T09:00:00Z", [
    rU("Change the dev server port to 3001."), rA("Set server.port to 3001 in the vite config.")])
rv("no-yaml", "/home/lee/code/deploy-scripts", "2026-01-16T09:00:00Z", [
    rU("The deploy script stopped working on the new runner."),
    rA("Running it.", rB("python deploy.py --env staging", "Traceback (most recent call last):\n  File \"deploy.py\", line 3, in <module>\n    import yaml\nModuleNotFoundError: No module named 'yaml'")),
    rA("The runner image lacks PyYAML; added it to the requirements and the image."),
])
rv("x-yaml-parse", "/home/lee/code/deploy-scripts", "2026-01-18T09:00:00Z", [
    rU("Parse the yaml deploy manifests and validate them."), rA("Loading them with yaml.safe_load and checking required keys.")])
rv("unrelated-hist", "/home/lee/code/docs-site", "2026-02-15T09:00:00Z", [
    rU("I can't pull the template changes into our docs repo."),
    rA("Trying the merge.", rB("git pull template main", "From github.com:acme/docs-template\n * branch            main       -> FETCH_HEAD\nfatal: refusing to merge unrelated histories")),
    rA("The repos share no commit; merged once with --allow-unrelated-histories and resolved the conflicts."),
])
rv("x-rebase", "/home/lee/code/docs-site", "2026-02-16T09:00:00Z", [
    rU("Rebase my branch on main."), rA("Rebased; resolved conflicts in two markdown files.")])
rv("cert-verify", "/home/lee/code/scraper", "2026-03-30T09:00:00Z", [
    rU("The scraper fails at the office but works at home."),
    rA("Running it here.", rB("python scrape.py", "requests.exceptions.SSLError: HTTPSConnectionPool(host='api.vendor.com', port=443): Max retries exceeded with url: /v2/items (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate')))")),
    rA("The office proxy re-signs TLS. Pointed REQUESTS_CA_BUNDLE at the corporate root certificate."),
])
rv("x-nginx-ssl", "/home/lee/ops/edge", "2026-03-31T09:00:00Z", [
    rU("Enable TLS 1.3 only in nginx."), rA("Set ssl_protocols TLSv1.3 and reloaded.")])
rv("segfault", "/home/lee/code/imaging", "2026-04-18T09:00:00Z", [
    rU("The thumbnail worker crashes on some PNGs."),
    rA("Reproducing with one of the files.", rB("python make_thumbs.py samples/broken.png", "Processing samples/broken.png\nSegmentation fault (core dumped)")),
    rA("The old Pillow wheel crashes on truncated PNGs; upgraded Pillow and we skip unreadable images with a warning."),
])
rv("x-core-limit", "/home/lee/code/imaging", "2026-04-19T09:00:00Z", [
    rU("Enable core dumps for the worker."), rA("Set ulimit -c unlimited in the service file.")])
rv("open-files", "/home/lee/code/indexer", "2026-05-09T09:00:00Z", [
    rU("The indexer stops halfway through large repositories."),
    rA("Running it on the big repo.", rB("./indexer --repo /data/monorepo", "indexed 48211 files\nOSError: [Errno 24] Too many open files: '/data/monorepo/pkg/a/b/c.go'")),
    rA("Files were opened without being closed in the walker. Using a with block; also raised the soft nofile limit."),
])
rv("x-inotify", "/home/lee/code/indexer", "2026-05-10T09:00:00Z", [
    rU("The file watcher misses changes in big folders."), rA("Raised fs.inotify.max_user_watches to 524288.")])

# 6. long: a whole natural-language question
rv("backup-timeout", "/home/lee/ops/backups", "2026-02-28T09:00:00Z", [
    rU("The nightly backup job to s3 has been timing out for a week."),
    rA("The pg_dump stream is uploaded in one PUT and the 5 GB limit and timeout hit. Switched to multipart upload with 64 MB parts and compressed the dump.",
       rE("backup.sh", "aws s3 cp dump.sql s3://acme-backups/", "pg_dump | zstd | aws s3 cp - s3://acme-backups/$(date +%F).sql.zst --expected-size 20000000000")),
    rA("The backup now finishes in 11 minutes."),
])
rv("x-s3-slow", "/home/lee/ops/backups", "2026-03-01T09:00:00Z", [
    rU("Downloads from s3 are slow in the office."), rA("Enabled transfer acceleration for the bucket.")])
rv("flaky-login-ci", "/home/lee/code/webapp", "2026-03-10T09:00:00Z", [
    rU("The login end-to-end test fails on CI, but only on the second run of the job."),
    rA("The first run leaves a user in the shared database and the second signup collides. The test now creates a unique user per run and cleans up."),
])
rv("x-login-ui", "/home/lee/code/webapp", "2026-03-11T09:00:00Z", [
    rU("Redesign the login page."), rA("New layout with social login buttons.")])
rv("ws-proxy", "/home/lee/ops/edge", "2026-03-21T09:00:00Z", [
    rU("Websocket connections drop after 60 seconds behind the load balancer."),
    rA("The reverse proxy did not forward the Upgrade headers and the load balancer idle timeout was 60s. Added proxy_set_header Upgrade/Connection, proxy_read_timeout 1h, and raised the idle timeout."),
])
rv("x-lb-health", "/home/lee/ops/edge", "2026-03-22T09:00:00Z", [
    rU("The load balancer marks instances unhealthy."), rA("The health check path changed; updated it.")])
rv("double-render", "/home/lee/code/webapp", "2026-04-07T09:00:00Z", [
    rU("The analytics page_view event fires twice on every navigation."),
    rA("React 18 StrictMode mounts components twice in development, and the effect sending the event had no guard. Moved tracking to the router listener so each navigation sends one event."),
])
rv("x-analytics-setup", "/home/lee/code/webapp", "2026-04-08T09:00:00Z", [
    rU("Add analytics to the app."), rA("Added the tracking snippet and a consent banner.")])
rv("soft-delete", "/home/lee/code/accounts", "2026-02-04T09:00:00Z", [
    rU("Add soft deletes to the users table."),
    rA("Added deleted_at. The unique constraint on email would block re-registering a deleted address, so I replaced it with a partial unique index WHERE deleted_at IS NULL.",
       rW("migrations/0040_soft_delete.sql", "ALTER TABLE users ADD COLUMN deleted_at timestamptz;\nCREATE UNIQUE INDEX users_email_live ON users (email) WHERE deleted_at IS NULL;")),
])
rv("x-hard-delete", "/home/lee/code/accounts", "2026-02-05T09:00:00Z", [
    rU("Delete a user's data on request."), rA("Wrote a GDPR deletion script that removes the user and their uploads.")])
rv("gha-cache", "/home/lee/code/api", "2026-03-29T09:00:00Z", [
    rU("Our docker builds in github actions never use the layer cache."),
    rA("Each runner starts empty. Using buildx with cache-from/cache-to type=gha so layers are restored between runs; builds went from 9 to 2 minutes."),
])
rv("x-gha-matrix", "/home/lee/code/api", "2026-03-30T09:00:00Z", [
    rU("Run the tests on three python versions in github actions."), rA("Added a matrix over 3.10, 3.11 and 3.12.")])
rv("billing-split", "/home/lee/code/monolith", "2026-05-15T09:00:00Z", [
    rU("Plan how to extract billing from the monolith."),
    rA("Billing becomes its own service with its own postgres database; the monolith calls it over HTTP and we migrate the invoices table with dual writes first."),
])
rv("x-monolith-modules", "/home/lee/code/monolith", "2026-05-16T09:00:00Z", [
    rU("Organise the monolith into modules."), rA("Proposed module boundaries for accounts, catalog and billing.")])
rv("dup-reminders", "/home/lee/code/jobs", "2026-04-27T09:00:00Z", [
    rU("Customers get the reminder email twice."),
    rA("Two workers pick up the same cron job. Added an advisory lock in postgres so only one worker sends reminders per run."),
])
rv("x-reminder-template", "/home/lee/code/jobs", "2026-04-28T09:00:00Z", [
    rU("Change the wording of the reminder email."), rA("Updated the template text.")])

# 7. filter: a short query narrowed by folder or date
rv("f-login-webapp", "/home/lee/code/webapp", "2026-03-03T09:00:00Z", [
    rU("Fix the login bug where the redirect loses the next parameter."), rA("The redirect now keeps ?next=.")])
for i, cwd in enumerate(["/home/lee/code/admin", "/home/lee/code/mobile-app"]):
    rv("fx-login-%d" % i, cwd, "2026-03-0%dT09:00:00Z" % (4 + i), [
        rU("Fix the login bug: the login button does nothing, fix the login handler."), rA("Fixed the login bug in the login handler.")])
rv("f-deps-recent", "/home/lee/code/cli-tool", "2026-06-02T09:00:00Z", [
    rU("Update dependencies."), rA("Updated the dependencies; two needed code changes.")])
rv("fx-deps-old", "/home/lee/code/cli-tool", "2026-03-02T09:00:00Z", [
    rU("Update dependencies and update the lockfile, all dependencies."), rA("Updated dependencies.")])
rv("f-compose-ops", "/home/lee/ops/stack", "2026-02-20T09:00:00Z", [
    rU("Add grafana to the docker compose file."), rA("Added the service to docker compose.")])
rv("fx-compose-late", "/home/lee/ops/stack", "2026-04-20T09:00:00Z", [
    rU("Docker compose: restart policy for every docker compose service."), rA("Set restart: unless-stopped in docker compose.")])
rv("fx-compose-app", "/home/lee/code/webapp", "2026-02-21T09:00:00Z", [
    rU("Write a docker compose file for local development, docker compose up should work."), rA("Added docker compose with the app and postgres.")])
rv("f-tests-api", "/home/lee/code/api", "2026-04-15T09:00:00Z", [
    rU("Add tests for the pagination helper."), rA("Added six tests covering empty and last pages.")])
rv("fx-tests-api-old", "/home/lee/code/api", "2026-02-15T09:00:00Z", [
    rU("Add tests, more tests, tests for everything in the serializers."), rA("Added tests.")])
rv("fx-tests-web", "/home/lee/code/webapp", "2026-04-16T09:00:00Z", [
    rU("Add tests for the form components; add tests for validation."), rA("Added tests.")])
rv("f-migration-jan", "/home/lee/code/orders-service", "2026-01-08T09:00:00Z", [
    rU("Write the database migration for the refunds table."), rA("Migration adds refunds with a foreign key to orders.")])
rv("fx-migration-mar", "/home/lee/code/orders-service", "2026-03-08T09:00:00Z", [
    rU("Database migration: squash the database migration files into one migration."), rA("Squashed the migrations.")])
rv("f-refactor-cli", "/home/lee/code/cli-tool", "2026-03-14T09:00:00Z", [
    rU("Refactor the argument parsing into subcommands."), rA("Each command now has its own module.")])
rv("fx-refactor-api", "/home/lee/code/api", "2026-03-15T09:00:00Z", [
    rU("Refactor, refactor the services layer, a big refactor of everything."), rA("Refactored the services.")])
rv("f-perf-webapp", "/home/lee/code/webapp", "2026-06-05T09:00:00Z", [
    rU("Performance of the search page: it re-renders on every keystroke."), rA("Debounced the input and memoised the results list.")])
rv("fx-perf-webapp-old", "/home/lee/code/webapp", "2026-04-05T09:00:00Z", [
    rU("Performance performance: profile the performance of the whole app."), rA("Collected a performance profile.")])
rv("fx-perf-api", "/home/lee/code/api", "2026-06-06T09:00:00Z", [
    rU("Performance of the API, performance tuning of the endpoints."), rA("Tuned performance.")])
rv("f-readme-early", "/home/lee/code/docs-site", "2026-01-09T09:00:00Z", [
    rU("Write the readme for the docs site."), rA("Wrote the readme with setup and deploy steps.")])
rv("fx-readme-late", "/home/lee/code/docs-site", "2026-02-09T09:00:00Z", [
    rU("The readme: rewrite the readme, readme badges, readme everything."), rA("Rewrote the readme.")])

# A second batch, written after the ranking work above, to check that it holds for sessions it
# was not tuned on (one or two per class).
# identifier
rv("n-ident1", "/home/kim/code/sync", "2026-06-02T10:00:00Z", [
    rU("The sync worker sometimes uploads the same file twice."),
    rA("Added a dedupe step keyed by content hash.", rW("sync/worker.py", "def should_skip_upload(entry, seen_hashes):\n    return entry.sha256 in seen_hashes")),
])
rv("n-ident1x", "/home/kim/code/sync", "2026-06-03T10:00:00Z", [
    rU("Uploads should resume after a network drop."),
    rA("Chunked uploads with a resume token per file."),
])
rv("n-ident2", "/home/kim/code/frontend", "2026-06-05T10:00:00Z", [
    rU("Dark mode flickers on first paint."),
    rA("Reading the theme before hydration now.", rE("src/theme/ThemeProvider.tsx", "const [t, setT] = useState('light')", "const [t, setT] = useState(getInitialColorScheme())")),
])
rv("n-ident2x", "/home/kim/code/frontend", "2026-06-06T10:00:00Z", [
    rU("Add a color picker to the settings page."),
    rA("Added the picker with the brand color scheme presets."),
])
# typo
rv("n-typo1", "/home/kim/code/mailer", "2026-06-08T10:00:00Z", [
    rU("Emails land in spam at gmail."),
    rA("SPF passes but DKIM signing was missing. Generated a DKIM key, published the TXT record and enabled signing in postfix via opendkim."),
])
rv("n-typo1x", "/home/kim/code/mailer", "2026-06-09T10:00:00Z", [
    rU("Add an unsubscribe link to every email."),
    rA("Added List-Unsubscribe headers and a footer link."),
])
rv("n-typo2", "/home/kim/ops/ansible", "2026-06-10T10:00:00Z", [
    rU("The ansible playbook hangs on the apt task."),
    rA("A dpkg lock was held by unattended-upgrades. Added a wait for the lock before the apt module runs."),
])
rv("n-typo2x", "/home/kim/ops/ansible", "2026-06-11T10:00:00Z", [
    rU("Split the ansible inventory per environment."),
    rA("Created staging and production inventories with group vars."),
])
# detail
rv("n-detail1", "/home/kim/code/payments", "2026-06-12T10:00:00Z", rv_long(
    [rU("Let's work on the payments service today.")],
    "What timeout did we agree for the acquirer call?", "We set the acquirer call timeout to 8 seconds, with one retry on 502.", []))
rv("n-detail2", "/home/kim/code/payments", "2026-06-14T10:00:00Z", rv_long(
    [rU("Continue the payments cleanup.")],
    "Which currency did the finance team want as the reporting default?", "They want CHF as the reporting default currency; EUR stays for invoices.", []))
# tool output
rv("n-tool1", "/home/kim/code/api-go", "2026-06-15T10:00:00Z", [
    rU("go build fails after the upgrade."),
    rA("Looking at the build.", rB("go build ./...", "internal/db/conn.go:14:2: undefined: pgx.ConnConfig.PreferSimpleProtocol")),
    rA("pgx v5 moved it to DefaultQueryExecMode; updated the config."),
])
rv("n-tool1x", "/home/kim/code/api-go", "2026-06-16T10:00:00Z", [
    rU("Add a health endpoint to the go api."),
    rA("Added /healthz that pings the database."),
])
rv("n-tool2", "/home/kim/code/ios", "2026-06-17T10:00:00Z", [
    rU("pod install fails."),
    rA("Running it.", rB("pod install", "[!] CocoaPods could not find compatible versions for pod \"Firebase/Core\"")),
    rA("Updated the spec repo and raised the deployment target to iOS 13."),
])
# long
rv("n-long1", "/home/kim/code/search", "2026-06-18T10:00:00Z", [
    rU("Search results show products that are out of stock first."),
    rA("Added a stock boost in the ranking function so in-stock items come first, and an availability filter on the facet."),
])
rv("n-long1x", "/home/kim/code/search", "2026-06-19T10:00:00Z", [
    rU("Products are missing from search after import."),
    rA("The import job did not trigger a reindex; added it."),
])
rv("n-long2", "/home/kim/code/infra", "2026-06-20T10:00:00Z", [
    rU("The staging database password leaked into the build logs."),
    rA("The deploy script echoed the env. Masked the variable in CI, rotated the password and removed the echo."),
])
# filter
rv("n-filter1", "/home/kim/code/sync", "2026-07-01T10:00:00Z", [
    rU("Write tests for the upload retry."),
    rA("Added tests for retry on 503 and give-up after three attempts."),
])
rv("n-filter1x", "/home/kim/code/frontend", "2026-07-02T10:00:00Z", [
    rU("Write tests for the upload button."),
    rA("Added component tests for the upload button states."),
])
rv("n-para1", "/home/kim/code/frontend", "2026-07-05T10:00:00Z", [
    rU("Screen readers cannot use the signup form."),
    rA("Added labels, aria-describedby for the errors and focus management so the form is accessible."),
])
rv("n-para2", "/home/kim/code/api-go", "2026-07-06T10:00:00Z", [
    rU("Too many requests from one client take the API down."),
    rA("Added rate limiting per API key with a token bucket; clients get 429 with Retry-After."),
])

# A third batch, written blind after this round's ranking work (2 per class), the sessions
# of the first two staying in as more look-alikes.
# identifier
rv("t-ident1", "/home/sam/code/node-api", "2026-08-02T10:00:00Z", [
    rU("The API crashes with heap out of memory on big imports."),
    rA("Raising the heap for the import worker.", rE("package.json", '"import": "node worker.js"', '"import": "node --max-old-space-size=4096 worker.js"')),
])
rv("t-ident1x", "/home/sam/code/node-api", "2026-08-03T10:00:00Z", [
    rU("Set the maximum request body size for uploads."),
    rA("Configured the body parser limit to 10mb."),
])
rv("t-ident2", "/home/sam/code/billing", "2026-08-05T10:00:00Z", [
    rU("Retries for the invoice sender are too aggressive."),
    rA("Made the retry count configurable.", rW("billing/settings.py", "INVOICE_SENDER_MAX_RETRY_COUNT = int(os.environ.get('INVOICE_SENDER_MAX_RETRY_COUNT', 3))")),
])
rv("t-ident2x", "/home/sam/code/billing", "2026-08-06T10:00:00Z", [
    rU("Count the invoices sent per day."),
    rA("Added a daily counter metric for sent invoices."),
])
# typo
rv("t-typo1", "/home/sam/code/webshop", "2026-08-08T10:00:00Z", [
    rU("npm install fails on the CI runner."),
    rA("A peer dependency conflict between react 18 and the date picker; pinned the picker to 4.x and added overrides in package.json."),
])
rv("t-typo1x", "/home/sam/code/webshop", "2026-08-09T10:00:00Z", [
    rU("Update the README install section."),
    rA("Rewrote the install steps for yarn and npm."),
])
rv("t-typo2", "/home/sam/code/ops", "2026-08-10T10:00:00Z", [
    rU("Prometheus alertmanager does not send anything to Slack."),
    rA("The webhook URL in alertmanager.yml was the old one; updated the receiver and reloaded the config."),
])
rv("t-typo2x", "/home/sam/code/ops", "2026-08-11T10:00:00Z", [
    rU("Add a Slack message when the deploy finishes."),
    rA("The deploy job now posts to the #releases channel."),
])
# detail
rv("t-detail1", "/home/sam/code/search-svc", "2026-08-12T10:00:00Z", rv_long(
    [rU("Work on the search service relevance today.")],
    "How many shards did we settle on for the products index?", "We settled on 6 primary shards and 1 replica for the products index.", [])),
rv("t-detail1x", "/home/sam/code/search-svc", "2026-08-13T10:00:00Z", [
    rU("The products index mapping needs a keyword field."),
    rA("Added a keyword subfield for the brand."),
])
rv("t-detail2", "/home/sam/code/mobile", "2026-08-14T10:00:00Z", rv_long(
    [rU("Continue the app store release prep.")],
    "Which minimum iOS version did product decide on?", "Product decided on iOS 15 as the minimum deployment target.", [])),
rv("t-detail2x", "/home/sam/code/mobile", "2026-08-15T10:00:00Z", [
    rU("Bump the app version for the release."),
    rA("Version is 3.4.0 now, build 412."),
])
# tool output
rv("t-tool1", "/home/sam/code/dashboard", "2026-08-16T10:00:00Z", [
    rU("The dashboard page is blank after the upgrade."),
    rA("Checking the console.", rB("npm run test -- Dashboard", "TypeError: Cannot read properties of undefined (reading 'map')\n    at Dashboard (src/Dashboard.tsx:41:23)")),
    rA("The widgets prop can be undefined while loading; defaulted it to an empty array."),
])
rv("t-tool1x", "/home/sam/code/dashboard", "2026-08-17T10:00:00Z", [
    rU("Add a map widget to the dashboard."),
    rA("Added the map widget with the store locations."),
])
rv("t-tool2", "/home/sam/code/infra-tf", "2026-08-18T10:00:00Z", [
    rU("terraform apply fails in the pipeline."),
    rA("Looking at the output.", rB("terraform apply -auto-approve", "Error: Error acquiring the state lock\n\nLock Info:\n  ID: 9f1c\n  Operation: OperationTypeApply")),
    rA("A crashed run left the lock; released it with force-unlock after checking nobody else was applying."),
])
rv("t-tool2x", "/home/sam/code/infra-tf", "2026-08-19T10:00:00Z", [
    rU("Move the terraform state to a new bucket."),
    rA("Migrated the state with terraform init -migrate-state."),
])
# long
rv("t-long1", "/home/sam/code/webshop", "2026-08-20T10:00:00Z", [
    rU("Customers get logged out when they switch between the shop and the blog subdomain."),
    rA("The session cookie is set for shop.example.com only. Setting Domain=.example.com and SameSite=Lax so both subdomains share it."),
])
rv("t-long1x", "/home/sam/code/webshop", "2026-08-21T10:00:00Z", [
    rU("Add a cookie consent banner to the shop."),
    rA("Added the banner and stored the choice in a cookie for a year."),
])
rv("t-long2", "/home/sam/code/data-pipeline", "2026-08-22T10:00:00Z", [
    rU("The nightly import writes duplicate rows when the job is retried."),
    rA("Made the load idempotent: an upsert keyed on the source id and the import date instead of plain inserts."),
])
rv("t-long2x", "/home/sam/code/data-pipeline", "2026-08-23T10:00:00Z", [
    rU("Schedule the import an hour later."),
    rA("Moved the cron to 03:00."),
])
# filter
rv("t-filter1", "/home/sam/code/webshop", "2026-09-01T10:00:00Z", [
    rU("Fix the checkout total rounding."),
    rA("Rounding now happens once on the total, in cents."),
])
rv("t-filter1x", "/home/sam/code/billing", "2026-09-02T10:00:00Z", [
    rU("Fix the checkout total rounding in the invoice."),
    rA("Invoice totals now round half up."),
])
rv("t-filter2", "/home/sam/code/ops", "2026-05-01T10:00:00Z", [
    rU("Rotate the TLS certificates."),
    rA("Rotated the certificates on the load balancer."),
])
rv("t-filter2x", "/home/sam/code/ops", "2026-09-05T10:00:00Z", [
    rU("Rotate the TLS certificates again."),
    rA("Rotated them with the new intermediate."),
])
# paraphrase
rv("t-para1", "/home/sam/code/webshop", "2026-09-06T10:00:00Z", [
    rU("Pictures on the product list take ages to appear."),
    rA("Serving WebP thumbnails with lazy loading and a CDN cache instead of the 4000px originals."),
])
rv("t-para2", "/home/sam/code/node-api", "2026-09-07T10:00:00Z", [
    rU("Two requests at the same moment both got the last item in stock."),
    rA("Wrapped the stock check and the decrement in a transaction with SELECT ... FOR UPDATE."),
])

# (class, query, [target ids], extra CLI arguments)
RV_QUERIES = [
    ("paraphrase", "the page jumps around while it loads", ["cls"], []),
    ("paraphrase", "make the container image smaller", ["docker-slim"], []),
    ("paraphrase", "stop the tests from randomly failing", ["flaky-race"], []),
    ("paraphrase", "app forgets who I am after refresh", ["auth-persist"], []),
    ("paraphrase", "speed up the slow database lookups for a customer", ["slow-queries"], []),
    ("paraphrase", "keep passwords and keys out of git", ["secret-scan"], []),
    ("paraphrase", "make the site work on phones", ["responsive"], []),
    ("paraphrase", "server runs out of memory after a day", ["mem-leak"], []),
    ("identifier", "payment intent webhook", ["stripe-hook"], []),
    ("identifier", "retry budget", ["retry-budget"], []),
    ("identifier", "users email idx", ["email-idx"], []),
    ("identifier", "rate limiter middleware", ["rate-limit-mw"], []),
    ("identifier", "fetch user profile hook", ["profile-hook"], []),
    ("identifier", "max connection pool size", ["pool-size"], []),
    ("identifier", "total cents", ["cents-rounding"], []),
    ("identifier", "parse json response", ["json-util"], []),
    ("typo", "kuberntes ingres timeout", ["k8s-ingress"], []),
    ("typo", "postgress conection pool", ["pg-pool"], []),
    ("typo", "elasticsaerch price mapping", ["es-mapping"], []),
    ("typo", "webpak bundle size", ["webpack-size"], []),
    ("typo", "terrafrom state drift", ["tf-drift"], []),
    ("typo", "redis cahce invalidation", ["redis-invalidate"], []),
    ("typo", "graphql subscripton websocket", ["gql-subs"], []),
    ("typo", "certifcate expired certbot", ["nginx-cert"], []),
    ("detail", "which port did we move grafana to", ["grafana-port"], []),
    ("detail", "what protobuf version did we pin", ["protobuf-pin"], []),
    ("detail", "who suggested the circuit breaker", ["breaker-priya"], []),
    ("detail", "healthcheck timeout start period", ["healthcheck-timeout"], []),
    ("detail", "which bucket do the nightly exports go to", ["nightly-bucket"], []),
    ("detail", "cleanup job schedule backups", ["cleanup-cron"], []),
    ("detail", "node version downgraded node-sass", ["node-downgrade"], []),
    ("detail", "feature flag new checkout", ["checkout-flag"], []),
    ("tool output", "ERR_OSSL_EVP_UNSUPPORTED", ["ossl"], []),
    ("tool output", "exit status 137", ["oom137"], []),
    ("tool output", "EADDRINUSE 5173", ["eaddrinuse"], []),
    ("tool output", "No module named 'yaml'", ["no-yaml"], []),
    ("tool output", "refusing to merge unrelated histories", ["unrelated-hist"], []),
    ("tool output", "CERTIFICATE_VERIFY_FAILED", ["cert-verify"], []),
    ("tool output", "segmentation fault core dumped", ["segfault"], []),
    ("tool output", "Too many open files", ["open-files"], []),
    ("long", "where did we figure out why the nightly backup job to s3 kept timing out and what did we change", ["backup-timeout"], []),
    ("long", "the session where we debugged the flaky login test on ci that only failed on the second run", ["flaky-login-ci"], []),
    ("long", "how did we configure the reverse proxy so websockets stay connected behind the load balancer", ["ws-proxy"], []),
    ("long", "what was the fix when the react component rendered twice and fired the analytics event two times", ["double-render"], []),
    ("long", "when we added soft deletes to the users table how did we handle the unique email constraint", ["soft-delete"], []),
    ("long", "why was the docker build cache not being used in github actions and how did we fix it", ["gha-cache"], []),
    ("long", "the conversation about splitting billing out of the monolith into its own service with its own database", ["billing-split"], []),
    ("long", "how did we stop the cron job from sending duplicate reminder emails when two workers ran at once", ["dup-reminders"], []),
    ("filter", "fix the login bug", ["f-login-webapp"], ["--cwd", "/home/lee/code/webapp"]),
    ("filter", "update dependencies", ["f-deps-recent"], ["--after", "2026-05-01"]),
    ("filter", "docker compose", ["f-compose-ops"], ["--cwd", "/home/lee/ops", "--before", "2026-03-01"]),
    ("filter", "add tests", ["f-tests-api"], ["--cwd", "/home/lee/code/api", "--after", "2026-04-01"]),
    ("filter", "database migration", ["f-migration-jan"], ["--before", "2026-02-01", "--cwd", "/home/lee/code/orders-service"]),
    ("filter", "refactor", ["f-refactor-cli"], ["--cwd", "/home/lee/code/cli-tool"]),
    ("filter", "performance", ["f-perf-webapp"], ["--after", "2026-06-01", "--cwd", "/home/lee/code/webapp"]),
    ("filter", "readme", ["f-readme-early"], ["--before", "2026-01-15"]),
    # the second batch
    ("identifier", "skip upload seen hashes", ["n-ident1"], []),
    ("identifier", "initial color scheme", ["n-ident2"], []),
    ("typo", "dkim singing postfix", ["n-typo1"], []),
    ("typo", "ansibel apt lock", ["n-typo2"], []),
    ("detail", "acquirer timeout seconds", ["n-detail1"], []),
    ("detail", "reporting default currency", ["n-detail2"], []),
    ("tool output", "undefined: pgx.ConnConfig.PreferSimpleProtocol", ["n-tool1"], []),
    ("tool output", "could not find compatible versions for pod", ["n-tool2"], []),
    ("long", "how did we make in stock products show up before the ones that are out of stock in search results", ["n-long1"], []),
    ("long", "what did we do after the staging database password showed up in the build logs", ["n-long2"], []),
    ("filter", "write tests upload", ["n-filter1"], ["--cwd", "/home/kim/code/sync"]),
    ("filter", "tests", ["n-filter1"], ["--after", "2026-06-30", "--cwd", "/home/kim/code/sync"]),
    ("paraphrase", "make the form usable for blind people", ["n-para1"], []),
    ("paraphrase", "one client hammering the api brings it down", ["n-para2"], []),
    # the third batch
    ("identifier", "max old space size", ["t-ident1"], []),
    ("identifier", "invoice sender max retry count", ["t-ident2"], []),
    ("typo", "peer dependancy conflict react", ["t-typo1"], []),
    ("typo", "alertmanger slack webhook", ["t-typo2"], []),
    ("detail", "how many shards for the products index", ["t-detail1"], []),
    ("detail", "minimum ios version", ["t-detail2"], []),
    ("tool output", "Cannot read properties of undefined (reading 'map')", ["t-tool1"], []),
    ("tool output", "Error acquiring the state lock", ["t-tool2"], []),
    ("long", "why did customers get logged out when moving between the shop and the blog and how did we fix the cookie", ["t-long1"], []),
    ("long", "the session where the nightly import created duplicate rows whenever the job was retried and we made it idempotent", ["t-long2"], []),
    ("filter", "checkout total rounding", ["t-filter1"], ["--cwd", "/home/sam/code/webshop"]),
    ("filter", "rotate tls certificates", ["t-filter2"], ["--before", "2026-06-01"]),
    ("paraphrase", "images load slowly on the catalog page", ["t-para1"], []),
    ("paraphrase", "two buyers got the same last item", ["t-para2"], []),
]

RV_SHARED = os.path.join(HERE, "..", "shared")


def rv_evaluate(fmt, workdir, exe=None, filler=300, paging=None, queries=None):
    """Render the set (and `filler` ordinary sessions) in one agent's layout under workdir, index it
    with sesame (in-process, or the sesame.py at `exe`), run every query; per-query ranks and totals.
    With a list as `paging`, each query is also asked in pages of 4, and those whose pages do not
    make up the first 24 results of one long list are added to it."""
    import contextlib
    import io as _io
    sys.path.insert(0, os.path.join(RV_SHARED, "relevance"))
    import render
    corpus = os.path.join(str(workdir), "corpus")
    for s in RV_SESSIONS:
        render.RENDER[fmt](s, corpus)
    base = os.path.join(corpus, {"pi": "pi/sessions", "claude": "claude/projects", "codex": "codex/sessions"}[fmt])
    if filler:
        out = os.path.join(str(workdir), "filler")
        subprocess.run([sys.executable, os.path.join(RV_SHARED, "bench", "gen_corpus.py"), out, "--sessions",
                        str(filler), "--format", fmt, "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        sub = os.path.join(out, {"pi": "sessions", "claude": "projects", "codex": "sessions"}[fmt])
        for dp, _, fs in os.walk(sub):
            dst = os.path.join(base, os.path.relpath(dp, sub))
            os.makedirs(dst, exist_ok=True)
            for f in fs:
                shutil.move(os.path.join(dp, f), os.path.join(dst, f))
    env = dict(os.environ, SESAME_DATA_DIR=os.path.join(str(workdir), "data"), NO_COLOR="1",
               SESAME_CONFIG_DIR=os.path.join(str(workdir), "config"))
    os.makedirs(env["SESAME_CONFIG_DIR"], exist_ok=True)
    with open(os.path.join(env["SESAME_CONFIG_DIR"], "config.jsonc"), "w") as f:
        json.dump({"sources": [{"parser": fmt, "path": base}]}, f)

    def sesame_run(argv):
        if exe:
            return subprocess.run([sys.executable, exe] + argv, env=env, capture_output=True, text=True).stdout
        old = dict(os.environ)
        os.environ.update(env)
        buf = _io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(_io.StringIO()):
                sesame.main(argv)
        finally:
            os.environ.clear()
            os.environ.update(old)
        return buf.getvalue()

    sesame_run(["index"])
    rows = []
    for cls, query, targets, extra in queries or RV_QUERIES:
        want = {str(render.uuid.uuid5(render.NS, "rv-" + t)) for t in targets}
        out = sesame_run(["search", query, "--json", "--limit", "10", "--max-chars", "0", "--no-refresh"] + extra)
        try:
            got = [r["sessionId"] for r in json.loads(out)["results"]]
        except (ValueError, KeyError):
            got = []
        rank = next((i + 1 for i, g in enumerate(got) if g in want), None)
        rows.append((cls, query, extra, rank, len(got)))
        if paging is not None:
            def ids(*more):
                out = sesame_run(["search", query, "--json", "--max-chars", "0", "--no-refresh"] + extra + list(more))
                return [r["sessionId"] for r in json.loads(out)["results"]]
            if [i for o in range(0, 24, 4) for i in ids("--limit", "4", "--offset", str(o))] != ids("--limit", "24"):
                paging.append(query)
    return rows


def rv_table(rows):
    classes = list(dict.fromkeys(r[0] for r in rows)) + ["all"]
    lines = ["| class | queries | hit@1 | hit@3 | MRR | zero results |", "|---|---|---|---|---|---|"]
    for c in classes:
        sel = [r for r in rows if c == "all" or r[0] == c]
        hit1 = sum(1 for r in sel if r[3] == 1)
        hit3 = sum(1 for r in sel if r[3] and r[3] <= 3)
        mrr = sum(1.0 / r[3] for r in sel if r[3]) / len(sel)
        lines.append("| %s | %d | %d | %d | %.3f | %d |" % (c, len(sel), hit1, hit3, mrr, sum(1 for r in sel if not r[4])))
    return "\n".join(lines)


def test_relevance_v2_set_is_well_formed():
    ids = {s["id"] for s in RV_SESSIONS}
    assert len(ids) == len(RV_SESSIONS)
    counts = collections.Counter(c for c, _, _, _ in RV_QUERIES)
    assert set(counts) == {"paraphrase", "identifier", "typo", "detail", "tool output", "long", "filter"}
    assert all(n >= 8 for n in counts.values())
    text = {s["id"]: json.dumps(s["turns"]).lower() for s in RV_SESSIONS}
    everything = " ".join(text.values())
    for cls, query, targets, extra in RV_QUERIES:
        assert all("rv-" + t in ids for t in targets), query
        if cls == "typo":   # at least one query word is misspelt: found in no session at all
            assert any(w not in everything for w in query.lower().split()), query
        if cls == "tool output":   # the key string is only in a command's output
            target = next(s for s in RV_SESSIONS if s["id"] == "rv-" + targets[0])
            talk = json.dumps([t[1] for t in target["turns"]]).lower()
            assert query.lower().split()[0].strip("'") not in talk, query
        if cls == "long":
            assert 12 <= len(query.split()) <= 25, query
        if cls == "filter":
            assert extra, query


@pytest.mark.skipif(not os.path.isdir(os.path.join(RV_SHARED, "relevance")), reason="needs ../shared/relevance")
@slow
def test_relevance_v2_meets_target(tmp_path):
    """No query of any class returns nothing, and every class but paraphrase puts its target first
    at least 90% of the time. Paraphrases (words that occur nowhere in the target) are reported by
    the report below and not asserted: with no model of meaning, Sesame finds them only through the
    abbreviation table and the words the user happened to share with the session."""
    paging = []
    rows = rv_evaluate("pi", tmp_path, paging=paging)
    zero = [r[1] for r in rows if not r[4]]
    assert not zero, zero
    assert not paging, "pages of 4 differ from one long list for %s" % paging
    for cls in sorted({r[0] for r in rows} - {"paraphrase"}):
        sel = [r for r in rows if r[0] == cls]
        hit1 = sum(1 for r in sel if r[3] == 1)
        assert hit1 >= 0.9 * len(sel), "%s\n%s\n%s" % (cls, rv_table(rows), "\n".join(
            "  %-5s %s %s" % ("#%d" % r[3] if r[3] else "miss", r[1], " ".join(r[2])) for r in sel if r[3] != 1))


@pytest.mark.skipif(not os.environ.get("SESAME_RELEVANCE"), reason="report: set SESAME_RELEVANCE=1")
@pytest.mark.parametrize("fmt", ["pi", "claude", "codex"])
def test_relevance_v2_report(tmp_path, fmt):
    rows = rv_evaluate(fmt, tmp_path, exe=os.environ.get("SESAME_RELEVANCE_EXE"))
    print("\n\nRelevance v2, %s layout (%s):\n%s" % (fmt, os.environ.get("SESAME_RELEVANCE_EXE") or "this sesame.py",
                                                  rv_table(rows)))
    for cls, query, extra, rank, n in rows:
        print("  %-5s %-12s %s %s (%d results)" % ("#%d" % rank if rank else "miss", cls, query, " ".join(extra), n))


def rv_variants(seed=11):
    """The set's queries as people also type them: one letter wrong in the longest word, a prefix
    naming the session or asking the question, Title Case. (class, variant, query, targets, extra)."""
    import random
    rnd = random.Random(seed)

    def typo(w):
        i = rnd.randrange(1, len(w) - 1)
        return rnd.choice([w[:i] + w[i + 1:], w[:i] + w[i + 1] + w[i] + w[i + 2:], w[:i] + rnd.choice("aeiostnr") + w[i + 1:]])
    out = []
    for cls, query, targets, extra in RV_QUERIES:
        if cls in ("paraphrase", "long"):
            continue
        words = query.split()
        variants = {"prefix 'the session where we'": "the session where we " + query,
                    "prefix 'the conversation about'": "the conversation about " + query,
                    "prefix 'where did we'": "where did we " + query,
                    "prefix 'when we talked about'": "when we talked about " + query,
                    "Title Case": " ".join(w.capitalize() for w in words)}
        longest = max(range(len(words)), key=lambda i: len(words[i]))
        if cls != "typo" and len(words[longest]) >= 5 and words[longest].isalpha():
            variants["one typo"] = " ".join(typo(w) if i == longest else w for i, w in enumerate(words))
        out += [(cls, name, q, targets, extra) for name, q in variants.items()]
    return out


@pytest.mark.skipif(not os.environ.get("SESAME_RELEVANCE"), reason="report: set SESAME_RELEVANCE=1")
def test_relevance_v2_robustness_report(tmp_path):
    """hit@1 of the set's queries typed differently (see rv_variants), pi layout."""
    variants = rv_variants()
    rows = rv_evaluate("pi", tmp_path, exe=os.environ.get("SESAME_RELEVANCE_EXE"),
                       queries=[(name, q, targets, extra) for _, name, q, targets, extra in variants])
    print("\n\nRelevance v2 robustness, pi layout (%s):" % (os.environ.get("SESAME_RELEVANCE_EXE") or "this sesame.py"))
    print(rv_table(rows))
    for name, query, extra, rank, n in rows:
        if rank != 1:
            print("  %-5s %-34s %s %s" % ("#%d" % rank if rank else "miss", name, query, " ".join(extra)))


# ==================================================================================================
# Benchmark (opt-in): SESAME_BENCH=1 python3 -m pytest -q -s -k benchmark
# It measures what a user runs: sesame.py installed the README's way (copied onto PATH as `sesame`,
# run by name, whole process, its code cache warm), on corpora of 100 MB and 1 GB in each agent
# layout asked for (pi, Claude Code, Codex: ../shared/bench/gen_corpus.py --format).
# Options: SESAME_BENCH_LAYOUTS (default "pi,claude,codex"), SESAME_BENCH_SIZES (search corpora in
# MB, default "100,1000"), SESAME_BENCH_INDEX_MB (the full-index corpus, default 500 or the largest
# size below it), SESAME_BENCH_FILES (small sessions added beside it, default 10000; 500 beside a
# smaller main corpus), SESAME_BENCH_EXE (another
# sesame.py to measure, e.g. an older version), SESAME_BENCH_DIR (keep generated corpora there
# between runs). It prints a table; it asserts nothing about time.
# ==================================================================================================

# The TypeScript original on the same 100 MB corpus (medians, ms), as measured in the speed issue.
ORIGINAL_MEDIAN_MS = {"rare word": 35, "concept, 2-5 words": 59, "relaxed (no session has all)": 38,
                      "common words": 315}

# Per layout: gen_corpus.py's folder of the sessions (the source to configure), and where a session
# the benchmark writes itself goes under it.
BENCH_LAYOUTS = {"pi": ("sessions", "--home-dev-code-bench--/2026-03-10T09-00-00-000Z_%s.jsonl"),
                 "claude": ("projects", "-home-dev-code-bench/%s.jsonl"),
                 "codex": ("sessions", "2026/03/10/rollout-2026-03-10T09-00-00-%s.jsonl")}
BENCH_CWD = "/home/dev/code/bench"


def _bench_corpus(out, mb, seed, layout="pi"):
    """A corpus of about `mb` MB in `layout`: ../shared/bench/gen_corpus.py when present, else (pi
    only) a small generator of our own made of this Python's standard-library docstrings and code.
    Kept in SESAME_BENCH_DIR when that is set. File times are set to each session's last entry, as
    an agent's writes leave them on a real disk (a freshly generated file says "written just now")."""
    keep = os.environ.get("SESAME_BENCH_DIR")
    folder = BENCH_LAYOUTS[layout][0]
    if keep:
        out = os.path.join(keep, "corpus-%s-%d-%d" % (layout, mb, seed))
        if os.path.exists(os.path.join(out, "done")):
            # a kept corpus was changed by the last run (appends, every file dated now): dated again
            _date_by_last_entry(os.path.join(out, folder))
            _bench_agent_folder(layout, out)
            return os.path.join(out, folder)
        shutil.rmtree(out, ignore_errors=True)
    out = str(out)
    gen = os.path.join(HERE, "..", "shared", "bench", "gen_corpus.py")
    root = os.path.join(out, folder)
    if os.path.exists(gen):
        subprocess.run([sys.executable, gen, out, "--mb", str(mb), "--seed", str(seed), "--format", layout],
                       check=True, stdout=subprocess.DEVNULL)
    elif layout != "pi":
        pytest.skip("the %s layout needs ../shared/bench/gen_corpus.py" % layout)
    else:
        import sysconfig
        rnd = random.Random(seed)
        pool = []
        for dp, _, fs in os.walk(sysconfig.get_paths()["stdlib"]):
            for f in sorted(fs)[:40]:
                if f.endswith(".py"):
                    try:
                        pool.append(open(os.path.join(dp, f), encoding="utf-8").read()[:20000])
                    except (OSError, UnicodeDecodeError):
                        pass
            if len(pool) > 2000:
                break
        written, n = 0, 0
        while written < mb * 1e6:
            n += 1
            day = "2026-%02d-%02dT10:00:00.000Z" % (1 + n % 9, 1 + n % 27)
            w = PiWriter(root, "bench-%d-%06d" % (seed, n), cwd="/home/dev/code/p%d" % (n % 10), start=day)
            for _ in range(rnd.randint(10, 60)):
                text = rnd.choice(pool)
                i = rnd.randrange(max(1, len(text) - 600))
                w.user(" ".join(text[i:i + 300].split()))
                w.tool("bash", {"command": "pytest -q"}, text[i:i + rnd.randint(200, 3000)])
                w.assistant(" ".join(text[i + 300:i + 700].split()))
            written += os.path.getsize(w.save())
    _date_by_last_entry(root)
    _bench_agent_folder(layout, out)
    open(os.path.join(out, "done"), "w").close()
    return root


def _bench_agent_folder(layout, out):
    """What the agent keeps beside its sessions folder that the refresh looks at: pi's auth.json
    (made at its first start; locked at every start, see agent_starts)."""
    if layout == "pi" and not os.path.exists(os.path.join(out, "auth.json")):
        with open(os.path.join(out, "auth.json"), "w") as f:
            f.write("{}")


def _date_by_last_entry(root):
    """Set each session file's time to its last entry's, as an agent's writes leave it, and each
    folder's to its newest file's or folder's (a folder's time is that of the last file made in it:
    Codex's day folders and a project's folder stay as old as their last session)."""
    for dp, ds, fs in os.walk(root, topdown=False):
        times = []
        for f in fs:
            path = os.path.join(dp, f)
            with open(path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(path) - 65536))
                last = fh.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
            when = sesame.parse_time(json.loads(last).get("timestamp"))
            if when:
                os.utime(path, (when.timestamp(), when.timestamp()))
                times.append(when.timestamp())
        times += [os.stat(os.path.join(dp, d)).st_mtime for d in ds]
        if times:
            os.utime(dp, (max(times), max(times)))


def _bench_lines(layout, sid, turns, first=0, header=True):
    """The records of a session in `layout`, as the agent writes them: each turn (prompt, tool output,
    reply) is a prompt, a shell call with its output and a reply. `first` numbers the records (an
    append goes on from the records before it); header: the session's first record (pi, Codex)."""
    def ts(i):
        return "2026-03-10T%02d:%02d:%02d.000Z" % (9 + i // 3600 % 12, i // 60 % 60, i % 60)
    recs = []
    if header and layout == "pi":
        recs.append({"type": "session", "version": 3, "id": sid, "timestamp": ts(first), "cwd": BENCH_CWD})
    if header and layout == "codex":
        recs.append({"timestamp": ts(first), "type": "session_meta", "payload": {
            "id": sid, "timestamp": ts(first), "cwd": BENCH_CWD, "originator": "codex_cli_rs", "cli_version": "0.58.0"}})
    for k, (prompt, output, reply) in enumerate(turns):
        i = first + 4 * k
        cid = "call_%d" % i
        if layout == "pi":
            msgs = [{"role": "user", "content": [{"type": "text", "text": prompt}]},
                    {"role": "assistant", "content": [{"type": "toolCall", "id": cid, "name": "bash",
                                                       "arguments": {"command": "make step"}}], "stopReason": "toolUse"},
                    {"role": "toolResult", "toolCallId": cid, "toolName": "bash", "content": [{"type": "text", "text": output}],
                     "isError": False},
                    {"role": "assistant", "content": [{"type": "text", "text": reply}], "stopReason": "stop"}]
            recs += [{"type": "message", "id": "%s-%d" % (sid, i + j), "parentId": "%s-%d" % (sid, i + j - 1) if i + j > first else None,
                      "timestamp": ts(i + j), "message": m} for j, m in enumerate(msgs)]
        elif layout == "claude":
            msgs = [("user", {"role": "user", "content": prompt}),
                    ("assistant", {"id": "msg_%d" % i, "role": "assistant", "content": [
                        {"type": "tool_use", "id": cid, "name": "Bash", "input": {"command": "make step"}}]}),
                    ("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": output}]}),
                    ("assistant", {"id": "msg_%d_r" % i, "role": "assistant", "content": [{"type": "text", "text": reply}]})]
            recs += [{"type": kind, "uuid": "%s-%d" % (sid, i + j), "parentUuid": "%s-%d" % (sid, i + j - 1) if i + j > first else None,
                      "sessionId": sid, "cwd": BENCH_CWD, "isSidechain": False, "timestamp": ts(i + j), "message": m}
                     for j, (kind, m) in enumerate(msgs)]
        else:
            payloads = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
                        {"type": "function_call", "name": "shell", "call_id": cid,
                         "arguments": json.dumps({"command": ["bash", "-lc", "make step"]})},
                        {"type": "function_call_output", "call_id": cid,
                         "output": json.dumps({"output": output, "metadata": {"exit_code": 0}})},
                        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": reply}]}]
            recs += [{"timestamp": ts(i + j), "type": "response_item", "payload": p} for j, p in enumerate(payloads)]
            # (the prompt's second copy, as Codex writes it, and the generated corpus)
            recs.insert(len(recs) - 3, {"timestamp": ts(i), "type": "event_msg",
                                        "payload": {"type": "user_message", "message": prompt}})
    return recs


def _bench_session(layout, root, sid, turns):
    """Write a session of `layout` under root (the layout's sessions folder); returns its path."""
    path = os.path.join(str(root), BENCH_LAYOUTS[layout][1] % sid)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(line(r) for r in _bench_lines(layout, sid, turns))
    return path


def _bench_started(layout, root):
    """What the agent changes when it starts, before the session it resumes is written (pi: the lock
    on auth.json in the folder above its sessions folder)."""
    if layout == "pi":
        agent_starts(os.path.dirname(str(root)), "auth.json")


def _bench_journal(layout, root, sid, text):
    """The line the agent writes to its change journal for a prompt in session `sid` (pi keeps none)."""
    if layout == "pi":
        return
    rec = ({"display": text, "pastedContents": {}, "timestamp": int(time.time() * 1000), "project": BENCH_CWD,
            "sessionId": sid} if layout == "claude" else {"session_id": sid, "ts": int(time.time()), "text": text})
    with open(os.path.join(os.path.dirname(str(root)), "history.jsonl"), "a") as f:
        f.write(line(rec))


# Runs argv[2:] as a child of this small process and writes the child's peak resident memory (KB,
# the largest of it and the processes it waited for) into the file argv[1]; exits as the child did.
_PEAK_RUNNER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


class _Installed:
    """sesame installed as the README says: the file copied into a folder on PATH as `sesame` and
    run by name, as a whole process, with its own (throwaway) cache, data and config folders."""

    def __init__(self, tmp_path, source, layout="pi"):
        self.bin, self.layout = str(tmp_path / "bin"), layout
        os.makedirs(self.bin, exist_ok=True)
        shutil.copy(source, os.path.join(self.bin, "sesame"))
        os.chmod(os.path.join(self.bin, "sesame"), 0o755)
        self.env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ.get("PATH", ""), NO_COLOR="1",
                        SESAME_DATA_DIR=str(tmp_path / "data"), SESAME_CONFIG_DIR=str(tmp_path / "config"),
                        XDG_CACHE_HOME=str(tmp_path / "cache"))
        os.makedirs(self.env["SESAME_CONFIG_DIR"], exist_ok=True)

    def configure(self, *roots):
        with open(os.path.join(self.env["SESAME_CONFIG_DIR"], "config.jsonc"), "w") as f:
            json.dump({"sources": [{"parser": self.layout, "path": str(r)} for r in roots]}, f)

    def run(self, *argv, memory=False):
        """(seconds, stdout) of one whole `sesame ARGV...` process. With memory=True, self.peak_mb is
        then the resident memory of its largest process (itself, or a worker it ran), as the kernel
        counted it. A process forked from this one (pytest, 170 MB) would start from this one's
        peak (Linux keeps the high-water mark across exec): a small Python process starts it instead,
        and sends its figure back (adding that process's own start, ~15 ms, to an index run)."""
        argv = ["sesame"] + list(argv)
        with tempfile.TemporaryDirectory() as d:
            if memory:
                argv = [sys.executable, "-I", "-S", "-c", _PEAK_RUNNER, os.path.join(d, "peak")] + argv
            t = time.perf_counter()
            r = subprocess.run(argv, env=self.env, capture_output=True, text=True)
            elapsed = time.perf_counter() - t
            assert r.returncode == 0, r.stderr
            if memory:
                with open(os.path.join(d, "peak")) as f:
                    self.peak_mb = int(f.read()) / 1024.0
        return elapsed, r.stdout

    def found(self, word):
        """(seconds, session ids) of `sesame search WORD --json`."""
        secs, out = self.run("search", word, "--json")
        return secs, [r["sessionId"] for r in json.loads(out)["results"]]

    def index_bytes(self):
        d = self.env["SESAME_DATA_DIR"]
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("index.sqlite"))


class _McpClient:
    """A client of `sesame mcp` (as installed) over stdio: JSON-RPC requests written to its stdin, the
    time taken until the response is read from its stdout."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(["sesame", "mcp"], env=cmd.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.n = 0
        self.ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "sesame-benchmark", "version": "1"}})
        self.proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

    def ask(self, method, params):
        self.n += 1
        t = time.perf_counter()
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
                               + "\n").encode())
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        return time.perf_counter() - t, reply

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _du(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def _stats(times):
    """(median, p95) of a list of seconds."""
    import statistics
    times = sorted(times)
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def _ms(times, digits=0):
    return "median %.*f ms, p95 %.*f ms" % (digits, 1000 * _stats(times)[0], digits, 1000 * _stats(times)[1])


def _bench_queries(data_dir, rnd, n=20):
    """Six classes of queries drawn from what the index holds (n each)."""
    con = sqlite3.connect(os.path.join(data_dir, "index.sqlite"))
    fts = con.execute("SELECT name FROM sqlite_master WHERE sql LIKE '%USING fts5%' ORDER BY name").fetchone()[0]
    con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, %s, 'row')" % fts)
    rare = [t for (t,) in con.execute("SELECT term FROM temp.v WHERE doc BETWEEN 1 AND 50 AND length(term) >= 4 "
                                      "AND term GLOB '[a-z][a-z][a-z]*' ORDER BY cnt, term LIMIT 2000")]
    users = [sesame.unpack(t) for (t,) in con.execute("SELECT text FROM chunks WHERE kind='user' AND length(text) > 40 "
                                                       "ORDER BY id LIMIT 4000")]
    con.close()
    concept = [" ".join(rnd.sample(ws, min(len(ws), rnd.randint(2, 5))))
               for ws in ([w for w in re.findall(r"[a-z]{5,}", u.lower())] for u in rnd.sample(users, 2 * n))
               if len(ws) >= 2][:n]
    # what an agent asks: the start of something a user wrote, 8-12 words as written
    long = [" ".join(ws[:rnd.randint(8, 12)]) for ws in (u.split() for u in rnd.sample(users, min(3 * n, len(users))))
            if len(ws) >= 12][:n]
    return {
        "rare word": rnd.sample(rare, min(n, len(rare))),
        "concept, 2-5 words": concept,
        "relaxed (no session has all)": [c + " zyxwvutsrq" for c in concept],
        "filtered (--cwd --after)": concept,
        "long question, 8-12 words": long,
        "common words": ["fix the error in the test", "how do I use this function", "the file is not found",
                         "return the value of the object", "what is the default for this"] * (n // 5),
    }


def _filters(name):
    return ["--cwd", "/home/dev/code/api", "--after", "2000-01-01"] if name.startswith("filtered") else []


def _bench_searches(sesame_cmd, label, rows, rnd, classes=None, extra=()):
    queries = _bench_queries(sesame_cmd.env["SESAME_DATA_DIR"], rnd)
    for name in classes or queries:
        times = [sesame_cmd.run("search", q, "--json", *(_filters(name) + list(extra)))[0] for q in queries[name]]
        orig = ORIGINAL_MEDIAN_MS.get(name)
        rows.append(("search, %s: %s (%d queries)" % (label, name, len(queries[name])),
                     _ms(times) + ("; original %d ms" % orig if orig and label == "pi 100 MB" else "")))


def _bench_mcp(cmd, label, rows, rnd):
    """Warm searches: the same classes as tool calls to one `sesame mcp` server, 60 each (a call
    costs a tenth of a command's: 20 made the median of a class move by 2 ms from run to run)."""
    client = _McpClient(cmd)
    try:
        for name, queries in _bench_queries(cmd.env["SESAME_DATA_DIR"], rnd, n=60).items():
            args = {"cwd": "/home/dev/code/api", "after": "2000-01-01"} if name.startswith("filtered") else {}
            times = []
            for q in queries:
                secs, reply = client.ask("tools/call", {"name": "search", "arguments": dict(args, query=q)})
                assert not reply["result"]["isError"], reply
                times.append(secs)
            rows.append(("MCP tool call, %s: %s" % (label, name), _ms(times, 1)))   # (targets of 10 ms: a tenth counts)
    finally:
        client.close()


def _bench_mcp_beside(cmd, label, layout, root, rows, rnd, others=4, calls=100):
    """Warm calls beside other servers: an agent runs one `sesame mcp` per session, on one index.
    One client appends a message to its own session (one of five being written) and searches for
    it at once, beside `others` servers whose background round runs every 3 s (as ten times as many
    would at the default 30 s): how long a call takes, and whether it found its append."""
    wrapper = ("import sys, importlib.machinery, importlib.util; l = importlib.machinery.SourceFileLoader('sesame', %r); "
               "spec = importlib.util.spec_from_loader('sesame', l); m = importlib.util.module_from_spec(spec); "
               "sys.modules['sesame'] = m; l.exec_module(m); m.MCP_REFRESH_SECONDS = 3.0; sys.exit(m.main(['mcp']))"
               % os.path.join(cmd.bin, "sesame"))
    con = sqlite3.connect(os.path.join(cmd.env["SESAME_DATA_DIR"], "index.sqlite"))
    files = con.execute("SELECT s.session_id, f.path FROM files f JOIN sessions s ON s.file_id = f.id "
                        "WHERE f.source = ? AND s.parent IS NULL ORDER BY f.path", (str(root),)).fetchall()
    con.close()
    own = rnd.sample(files, 5)
    tag = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))

    def append(sid, path, text):
        with open(path, "a") as f:
            f.writelines(line(r) for r in _bench_lines(layout, sid, [(text, "ok", "done")], 4 * (time.time_ns() // 1000), False))
    for sid, path in own:   # (the client's sessions are being written: indexed a moment ago)
        append(sid, path, "a session being written now")
    cmd.run("index")
    servers = [subprocess.Popen([sys.executable, "-c", wrapper], env=cmd.env, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(others)]
    client = _McpClient(cmd)
    times, found = [], 0
    try:
        client.ask("tools/call", {"name": "search", "arguments": {"query": "warm up"}})   # (opens the index)
        time.sleep(3)
        for n in range(calls):
            sid, path = rnd.choice(own)
            word = "besideword%s%sq" % (tag, "".join(chr(97 + int(c)) for c in "%03d" % n))   # (q: no stem cut)
            append(sid, path, word + " just now")
            secs, reply = client.ask("tools/call", {"name": "search", "arguments": {"query": word}})
            assert not reply["result"]["isError"], reply
            found += [r["sessionId"] for r in reply["result"]["structuredContent"]["results"]][:1] == [sid]
            times.append(secs)
            time.sleep(rnd.random() * 0.3)
    finally:
        client.close()
        for proc in servers:
            proc.stdin.close()
        for proc in servers:
            proc.wait(timeout=60)
    times.sort()
    rows.append(("MCP tool call beside %d other servers (their background every 3 s), %s: a message appended to "
                 "the client's own session, then searched" % (others, label),
                 "%s, slowest %.0f ms; found first %d of %d" % (_ms(times), 1000 * times[-1], found, len(times))))


def _bench_headless(layout, root, sid):
    """What a headless run resuming session `sid` leaves instead of a prompt history line (Claude Code
    `-p`: a file naming it in ~/.claude/sessions while it runs; `codex exec resume`: its row of
    ~/.codex/state_5.sqlite stamped); returns what undoes it once searched for (the run ended)."""
    above = os.path.dirname(str(root))
    if layout == "claude":
        folder = os.path.join(above, "sessions")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "%d.json" % (90000 + len(os.listdir(folder))))
        write_file(path, json.dumps({"pid": 90000, "sessionId": sid, "cwd": BENCH_CWD, "kind": "interactive",
                                     "entrypoint": "sdk-cli"}))
        return lambda: os.remove(path)
    con = sqlite3.connect(os.path.join(above, "state_5.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE IF NOT EXISTS threads (id TEXT PRIMARY KEY, updated_at INTEGER NOT NULL, "
                "updated_at_ms INTEGER)")
    con.execute("INSERT OR REPLACE INTO threads VALUES (?, ?, ?)", (sid, int(time.time()), time.time_ns() // 10 ** 6))
    con.close()
    return lambda: None


def _bench_resumed(cmd, label, layout, root, rows, rnd, headless=False):
    """20 old sessions chosen at random are resumed (the agent started, a message appended, the agent's
    journal line written, where it keeps one; or, `headless`, what `claude -p` and `codex exec` leave
    instead: see _bench_headless), each then searched for from another folder: found by the first
    search or not."""
    if headless:   # the store seen once before (a first sight only remembers where it stands)
        _bench_headless(layout, root, "bench-first-sight")()
        cmd.found("bench first sight")
    con = sqlite3.connect(os.path.join(cmd.env["SESAME_DATA_DIR"], "index.sqlite"))
    old = time.time_ns() - 30 * 86400 * 10 ** 9
    files = con.execute("SELECT s.session_id, f.path FROM files f JOIN sessions s ON s.file_id = f.id WHERE f.source = ? "
                        "AND f.mtime_ns < ? AND s.parent IS NULL ORDER BY f.path", (str(root), old)).fetchall()
    con.close()
    found, times = 0, []
    run_tag = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))  # a word of this call's own:
    for n, (sid, path) in enumerate(rnd.sample(files, min(20, len(files)))):   # an earlier call's sessions hold theirs
        word = "resumedword%s%s" % (run_tag, "".join(chr(97 + int(c)) for c in "%04d" % n))
        ended = _bench_headless(layout, root, sid) if headless else _bench_started(layout, root)
        with open(path, "a") as f:
            # (records numbered apart from any earlier run's: a kept corpus (SESAME_BENCH_DIR) may be
            # resumed twice, and a record id seen before is a repeat, read once)
            f.writelines(line(r) for r in _bench_lines(layout, sid, [(word + " again", "ok", "done")],
                                                       4 * (time.time_ns() // 1000), False))
        if not headless:
            _bench_journal(layout, root, sid, word + " again")
        secs, ids = cmd.found(word)
        found += ids == [sid]
        times.append(secs)
        if headless:
            ended()
    rows.append(("resumed old session%s, %s: found by the first search from another folder"
                 % (" headless (%s)" % ("claude -p" if layout == "claude" else "codex exec resume") if headless else "",
                    label), "%d of %d; %s" % (found, len(times), _ms(times))))


def _bench_dated_now(cmd, label, roots, rows, rnd):
    """Every file and folder dated now (a copied or restored history): searches with and without
    the refresh, once the index has caught up."""
    now = time.time() - 60
    for root in roots:
        for d, _, fs in os.walk(str(root)):
            for f in fs:
                os.utime(os.path.join(d, f), (now, now))
            os.utime(d, (now, now))
    cmd.run("index")
    # Each query with and without the refresh in turn: what changes as searches go on (the sweep's
    # place, caches beside the index filled by the first ones) weighs on both alike.
    queries = _bench_queries(cmd.env["SESAME_DATA_DIR"], rnd)
    for name in ("rare word", "concept, 2-5 words", "common words"):
        times = {(): [], ("--no-refresh",): []}
        for q in queries[name]:
            for extra in times:
                times[extra].append(cmd.run("search", q, "--json", *extra)[0])
        for extra, got in times.items():
            rows.append(("search, %s, every file dated now%s: %s (%d queries)" % (
                label, " " + extra[0] if extra else "", name, len(got)), _ms(got)))


def _bench_layout(tmp_path, layout, sizes, index_mb, nsmall, source, rows, rnd):
    """Everything measured for one agent's layout (see the benchmark's header)."""

    def installed(name):
        return _Installed(tmp_path / name, source, layout)

    # 1. Search on the smaller corpora (the original's figures are for pi at 100 MB).
    for mb in [m for m in sizes if m < index_mb]:
        cmd = installed("s%d" % mb)
        root = _bench_corpus(tmp_path / ("c%d" % mb), mb, seed=7, layout=layout)
        cmd.configure(root)
        secs, _ = cmd.run("index")
        rows.append(("full index, %s %d MB" % (layout, _du(root) / 1e6), "%.1f s = %.1f MB/s" % (secs, _du(root) / 1e6 / secs)))
        _bench_searches(cmd, "%s %d MB" % (layout, mb), rows, rnd)
        _bench_mcp(cmd, "%s %d MB" % (layout, mb), rows, rnd)
        _bench_resumed(cmd, "%s %d MB" % (layout, mb), layout, root, rows, rnd)
        if layout != "pi":   # (pi's start is its only trace, headless or not)
            _bench_resumed(cmd, "%s %d MB" % (layout, mb), layout, root, rows, rnd, headless=True)

    # 2. Full index of the main corpus: speed, memory, size.
    cmd = installed("main")
    root = _bench_corpus(tmp_path / "corpus", index_mb, seed=7, layout=layout)
    corpus_bytes = _du(root)
    cmd.configure(root)
    cmd.run("--version", memory=True)   # the first run after an install compiles the code cache
    rows.append(("peak resident memory of the first run after installing (compiles the code cache)",
                 "%.0f MB" % cmd.peak_mb))
    secs, _ = cmd.run("index", memory=True)
    rows += [("full index, %s %d MB" % (layout, corpus_bytes / 1e6), "%.1f s = %.1f MB/s" % (secs, corpus_bytes / 1e6 / secs)),
             ("peak resident memory of that index (its largest process)", "%.0f MB" % cmd.peak_mb),
             ("index size / corpus size, %s" % layout, "%.2f (%.0f MB)" % (cmd.index_bytes() / corpus_bytes, cmd.index_bytes() / 1e6))]

    # 3. No-op index over many more small sessions, and one message appended to a 20 MB session:
    #    `index`, and the first search after it (what a user notices).
    small, big_root = tmp_path / "small" / layout, tmp_path / "big" / layout
    for i in range(nsmall):
        os.utime(_bench_session(layout, small, "%08d-0000-4000-8000-000000000000" % i,
                                [("a small session about nothing", "ok", "done")]), (1.7e9, 1.7e9))
    brnd = random.Random(1)
    big_sid = "99999999-0000-4000-8000-000000000000"
    big_path = _bench_session(layout, big_root, big_sid, [
        ("step %d of the long migration %s" % (n, brnd.random()), "output line %s\n" % brnd.random() * 20, "next")
        for n in range(10000)])
    roots = [root, small, big_root]
    cmd.configure(*roots)
    cmd.run("index")
    nfiles = sum(1 for r in roots for _, _, fs in os.walk(str(r)) for _ in fs)
    rows.append(("no-op index, %s, %d files" % (layout, nfiles), "median %.3f s" % _stats([cmd.run("index")[0] for _ in range(5)])[0]))
    appends, first, found = [], [], 0
    for i in range(10):
        word = "appendedword%s" % chr(97 + i)
        with open(big_path, "a") as f:
            f.writelines(line(r) for r in _bench_lines(layout, big_sid, [(word + " about axolotls", "ok", "done")],
                                                       10 ** 6 + 4 * i, False))
        if i < 5:
            appends.append(cmd.run("index")[0])
        else:
            secs, ids = cmd.found(word)
            first.append(secs)
            found += ids == [big_sid]
    big_mb = os.path.getsize(big_path) / 1e6
    rows += [("one message appended to a %d MB session, %s: `index`" % (big_mb, layout), "median %.3f s (%d files)" % (_stats(appends)[0], nfiles)),
             ("one message appended to a %d MB session, %s: the first search" % (big_mb, layout),
              "%s; found %d of %d" % (_ms(first), found, len(first)))]

    # 4. Search on the larger corpora: the main corpus plus more sessions; warm (MCP) searches;
    #    resumed old sessions; then, at the largest, every file dated now.
    big_sizes = [m for m in sizes if m >= index_mb]
    for mb in big_sizes:
        if mb > index_mb:
            more = _bench_corpus(tmp_path / ("more%d" % mb), mb - index_mb, seed=11, layout=layout)
            roots.append(more)
            cmd.configure(*roots)
            secs2, _ = cmd.run("index", memory=True)
            rows.append(("index %s %d MB more (incremental)" % (layout, _du(more) / 1e6),
                         "%.1f s = %.1f MB/s; peak resident memory %.0f MB" % (secs2, _du(more) / 1e6 / secs2, cmd.peak_mb)))
        label = "%s %d MB" % (layout, mb)
        _bench_searches(cmd, label, rows, rnd)
        _bench_mcp(cmd, label, rows, rnd)
        if mb == big_sizes[-1]:
            _bench_mcp_beside(cmd, label, layout, root, rows, rnd)
        _bench_resumed(cmd, label, layout, root, rows, rnd)
        if layout != "pi":
            _bench_resumed(cmd, label, layout, root, rows, rnd, headless=True)
        if mb == big_sizes[-1]:
            _bench_dated_now(cmd, label, roots, rows, rnd)


@pytest.mark.skipif(not os.environ.get("SESAME_BENCH"), reason="benchmark: set SESAME_BENCH=1")
def test_benchmark(tmp_path):
    import platform
    sizes = [int(x) for x in os.environ.get("SESAME_BENCH_SIZES", "100,1000").split(",") if x.strip()]
    index_mb = int(os.environ.get("SESAME_BENCH_INDEX_MB") or min(500, max(sizes)))
    layouts = [x.strip() for x in os.environ.get("SESAME_BENCH_LAYOUTS", "pi,claude,codex").split(",") if x.strip()]
    nsmall = int(os.environ.get("SESAME_BENCH_FILES") or (10000 if index_mb >= 500 else 500))
    source = os.environ.get("SESAME_BENCH_EXE") or os.path.join(HERE, "sesame.py")
    rows, rnd = [], random.Random(5)

    # Start-up alone, as installed (the second run: the first one fills the code cache).
    cmd = _Installed(tmp_path / "startup", source)
    cmd.run("--version")
    rows.append(("start-up: `sesame --version`", _ms([cmd.run("--version")[0] for _ in range(11)])))
    for layout in layouts:
        _bench_layout(tmp_path / layout, layout, sizes, index_mb, nsmall, source, rows, rnd)

    print("\n\nSesame benchmark (%s): %s, %d cores, Python %s, SQLite %s"
          % (os.path.basename(source), platform.processor() or platform.machine(), os.cpu_count(),
             platform.python_version(), sqlite3.sqlite_version))
    print("| measurement | result |\n|---|---|")
    for k, v in rows:
        print("| %s | %s |" % (k, v))
