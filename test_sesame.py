"""Tests for sesame.py, in the order of its sections. Each test name says what a user would see.

Inputs are small literal sessions written here; when ../shared/samples exists the real sessions
there are indexed too. Run: python3 -m pytest -q
"""
import json
import os
import stat
import subprocess
import sys

import pytest

import sesame

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "..", "shared", "samples")


# ---------------------------------------------------------------------------------------------
# Helpers: write pi sessions, run the CLI in-process
# ---------------------------------------------------------------------------------------------

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
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SESAME_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("NO_COLOR", "1")
    root = tmp_path / "pi-sessions"
    root.mkdir()
    write_config({"sources": [{"parser": "pi", "path": str(root)}]}, tmp_path)
    return root


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
    code, out, err = run(capsys, "search", *argv, "--json")
    assert code == 0, err
    return [r["sessionId"] for r in json.loads(out)["results"]]


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


# ---------------------------------------------------------------------------------------------
# Paths and config
# ---------------------------------------------------------------------------------------------

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
    ({"sources": [{"parser": "pi", "path": "/does/not/exist"}]}, "does not exist"),
    ({"sources": "pi"}, "must be a list"),
])
def test_config_with_unknown_parser_or_missing_path_is_an_error(env, tmp_path, capsys, cfg, needle):
    write_config(cfg, tmp_path)
    code, _, err = run(capsys, "search", "anything")
    assert code == 1 and needle in err and "Traceback" not in err


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


# ---------------------------------------------------------------------------------------------
# Time
# ---------------------------------------------------------------------------------------------

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
    with pytest.raises(sesame.UsageError):
        sesame.parse_when("last tuesday", now)


# ---------------------------------------------------------------------------------------------
# pi parser
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Index
# ---------------------------------------------------------------------------------------------

def test_index_summary_counts_files_sessions_and_skipped_lines(env, capsys):
    PiWriter(env, "i-1").user("one").save(extra="garbage line\n")
    PiWriter(env, "i-2").user("two").save()
    code, out, err = run(capsys, "index", "--json")
    s = json.loads(out)
    assert (s["filesSeen"], s["filesIndexed"], s["sessions"], s["linesSkipped"]) == (2, 2, 2, 1)
    assert "2 files seen, 2 indexed" in err


def test_unchanged_files_are_not_read_again(corpus, capsys, monkeypatch):
    calls = []
    original = sesame.PiParser.parse
    monkeypatch.setattr(sesame.PiParser, "parse", lambda self, p, r: calls.append(p) or original(self, p, r))
    code, out, _ = run(capsys, "index", "--json")
    assert calls == [] and json.loads(out)["filesUnchanged"] == 10


def test_edited_file_is_reindexed_and_deleted_file_disappears(corpus, capsys):
    assert search_ids(capsys, "carousel") == ["bbbb2222-carousel"]
    w = PiWriter(corpus, "bbbb2222-carousel", cwd="/home/dev/site", start="2026-02-01T10:00:00.000Z")
    w.user("Now a testimonial slider instead.").save()
    assert search_ids(capsys, "carousel") == []
    assert search_ids(capsys, "testimonial") == ["bbbb2222-carousel"]
    os.remove(w.path)
    code, out, _ = run(capsys, "index", "--json")
    assert json.loads(out)["filesRemoved"] == 1
    assert search_ids(capsys, "testimonial") == []


def test_appended_message_becomes_searchable(corpus, capsys):
    path = [os.path.join(d, f) for d, _, fs in os.walk(corpus) for f in fs if "cccc3333" in f][0]
    with open(path, "a") as f:
        f.write(line({"type": "message", "id": "zz", "parentId": None, "timestamp": "2026-02-10T11:00:00.000Z",
                      "message": {"role": "user", "content": "also bump the wombat dependency"}}))
    assert search_ids(capsys, "wombat") == ["cccc3333-ci"]


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


def test_index_and_data_dir_are_readable_by_owner_only(corpus, tmp_path):
    data = tmp_path / "data"
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    for name in os.listdir(data):
        if name.startswith("index.sqlite"):
            assert stat.S_IMODE(os.stat(data / name).st_mode) == 0o600, name


def test_second_indexer_waits_for_the_first(corpus, tmp_path, capsys, monkeypatch):
    lock = sesame.IndexLock(str(tmp_path / "data"))
    assert lock.acquire(0)
    try:
        monkeypatch.setattr(sesame, "LOCK_WAIT_SECONDS", 0.3)
        code, _, err = run(capsys, "index")
        assert code == 1 and "another sesame index" in err
        code, out, err = run(capsys, "search", "carousel", "--json")  # search still answers
        assert code == 0 and "searching the index as it is" in err
    finally:
        lock.release()
    assert run(capsys, "index")[0] == 0


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


# ---------------------------------------------------------------------------------------------
# Query
# ---------------------------------------------------------------------------------------------

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
    assert q.terms == ['"parser.py"', '"exact phrase"', '"pref"*', '"AND"']
    assert q.excluded == ['"excluded"']


# ---------------------------------------------------------------------------------------------
# Search: ranking
# ---------------------------------------------------------------------------------------------

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


def test_thinking_does_not_outrank_what_was_said(corpus, capsys):
    assert search_ids(capsys, "kubernetes autoscaler")[:2] == ["cdcd8888-k8s", "abab7777-thinking"]


def test_conversation_outranks_tool_output(corpus, capsys):
    assert search_ids(capsys, "E403")[:2] == ["1212aaaa-tooltalk", "efef9999-toolonly"]


def test_relaxed_query_still_returns_sessions_with_most_words(corpus, capsys):
    code, out, _ = run(capsys, "search", "kubernetes autoscaler permissions walrus", "--json")
    results = json.loads(out)["results"]
    assert results[0]["sessionId"] == "cdcd8888-k8s" and results[0]["matchedAllTerms"] is False


def test_phrase_prefix_and_exclusion(corpus, capsys):
    assert search_ids(capsys, '"image carousel"') == ["bbbb2222-carousel"]
    assert search_ids(capsys, '"carousel image"') == []
    assert search_ids(capsys, "carous*") == ["bbbb2222-carousel"]
    assert "cdcd8888-k8s" not in search_ids(capsys, "autoscaler -permissions")
    assert search_ids(capsys, "autoscaler -permissions") == ["abab7777-thinking"]


def test_no_match_is_exit_zero_with_zero_results(corpus, capsys):
    code, out, _ = run(capsys, "search", "xylophonist", "--json")
    assert code == 0 and json.loads(out)["resultCount"] == 0


# ---------------------------------------------------------------------------------------------
# Search: filters
# ---------------------------------------------------------------------------------------------

def test_cwd_filter_includes_subdirectories_only(corpus, capsys):
    assert set(search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/api")) == {"cccc3333-ci", "dddd4444-users"}
    assert search_ids(capsys, "helper lookup health", "--cwd", "/home/dev/api/services") == ["dddd4444-users"]
    assert search_ids(capsys, "helper", "--cwd", "/home/dev/ap") == []


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


def test_limit_and_offset_page_without_gaps(corpus, capsys):
    all_ids = search_ids(capsys, "the", "--limit", "50")
    pages = [search_ids(capsys, "the", "--limit", "3", "--offset", str(o)) for o in range(0, len(all_ids), 3)]
    assert [i for p in pages for i in p] == all_ids


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

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


def test_unnamed_sessions_say_so(corpus, capsys):
    assert "(Unnamed)" in run(capsys, "search", "zanzibar")[1]


def test_status_reports_counts_sources_and_freshness(corpus, capsys):
    code, out, _ = run(capsys, "status", "--json")
    info = json.loads(out)
    assert info["sessions"] == 10 and info["perAgent"][0]["agent"] == "pi"
    assert info["changedSinceLastIndex"] == 0 and info["lastIndex"]
    PiWriter(corpus, "new-one").user("fresh").save()
    assert json.loads(run(capsys, "status", "--json")[1])["changedSinceLastIndex"] == 1
    assert "sqlite:" in run(capsys, "status")[1]


def test_usage_errors_exit_2_with_one_line(capsys):
    code, out, err = run(capsys, "search")
    assert code == 2 and err.count("\n") == 1
    code, out, err = run(capsys, "bogus-command")
    assert code == 2


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


# ---------------------------------------------------------------------------------------------
# Real samples (../shared/samples), when present
# ---------------------------------------------------------------------------------------------

needs_samples = pytest.mark.skipif(not os.path.isdir(SAMPLES), reason="../shared/samples not present")


@needs_samples
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
