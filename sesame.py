#!/usr/bin/env python3
"""Sesame: find old coding-agent sessions by what they were about.

Sesame indexes the session transcripts that coding agents (pi, Claude Code, Codex, ...) leave on
disk into one SQLite FTS5 index and ranks whole sessions with BM25, so that a few remembered
words ("nix flake simplify", "ECONNREFUSED in CI") find the right session first. It is one file,
needs only the Python standard library (3.9+) and an SQLite with FTS5, makes no network
connection, and never writes to the agents' files.

Usage:
    sesame search "QUERY" [--cwd PATH] [--after WHEN] [--before WHEN] [--agent NAME] [--json]
    sesame index [--full] [--json]      bring the index up to date (search does this by itself)
    sesame status [--json]              what is indexed, from where, and how fresh it is
    sesame sources [--json]             every supported agent, where it looks, what it found

The index lives in $SESAME_DATA_DIR (default ~/.local/share/sesame), the optional config in
$SESAME_CONFIG_DIR/config.jsonc (default ~/.config/sesame). See README.md for everything else.
"""

import argparse
import datetime
import errno
import hashlib
import json
import os
import re
import sqlite3
import sys
import time
import zlib

__version__ = "0.1.0"

# ==================================================================================================
# Constants
# ==================================================================================================

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

# Bump SCHEMA_VERSION when the tables change: an older index is then rebuilt from the session files
# (they are the source of truth), a newer one is refused rather than damaged.
SCHEMA_VERSION = 2

# Chunk kinds, and the FTS column of the per-session documents each kind is indexed in. The column
# weights are the ranking policy: what the user and the assistant said outranks what tools printed,
# and thinking or injected context can help a tie but never decide what a session is about.
KIND_COLUMN = {
    "user": "talk", "assistant": "talk", "summary": "talk", "custom": "talk",
    "tool": "tools",
    "thinking": "aside", "context": "aside",
}
DOC_COLUMNS = ("name", "talk", "tools", "aside")
DOC_WEIGHTS = {"name": 6.0, "talk": 3.0, "tools": 1.0, "aside": 0.3}
# Chunk-level weights pick the best matching chunks (snippets) inside a ranked session.
KIND_WEIGHT = {"user": 1.5, "assistant": 1.2, "summary": 1.2, "custom": 1.0, "tool": 0.8,
               "thinking": 0.3, "context": 0.2}

# A session is indexed for ranking as a few large documents ("parts") of consecutive chunks, so that
# words spread over many messages still count together. Parts close at PART_CHARS so that appending
# to a huge session only rewrites its last part.
PART_CHARS = 256 * 1024

# Very large tool outputs are capped: the head and the tail are kept, the middle is dropped with a
# note saying how much. Other long fields (file contents written by a tool, huge messages) likewise.
TOOL_OUTPUT_CAP = 8000
FIELD_CAP = 8000
CHUNK_CAP = 64000
# A line longer than this is skipped and counted rather than read into memory.
MAX_LINE_BYTES = 32 * 1024 * 1024
# A tool call still without its result this many lines later is kept without output.
PENDING_CALL_LINES = 2000

DEFAULT_LIMIT = 10
MATCHES_PER_SESSION = 3
SNIPPET_CHARS = 200
# FTS5 private-use markers around matched words; replaced by colour or ** at output time.
HL_OPEN, HL_CLOSE = "\x02", "\x03"

# ==================================================================================================
# Errors
# ==================================================================================================


class SesameError(Exception):
    """An expected failure: printed as one line on stderr, never as a traceback."""

    code = EXIT_ERROR
    kind = "error"

    def __init__(self, message, hint=None, code=None, kind=None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code
        if kind is not None:
            self.kind = kind


class UsageError(SesameError):
    """The command line asks for something impossible (exit 2)."""

    code = EXIT_USAGE
    kind = "usage"


class ConfigError(SesameError):
    kind = "config"


class IndexError_(SesameError):
    kind = "index"


def _stderr(msg):
    try:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# ==================================================================================================
# Paths and config
# ==================================================================================================


def _env_dir(override, xdg, fallback, env):
    if env.get(override):
        return os.path.expanduser(env[override])
    base = env.get(xdg) or os.path.join(os.path.expanduser("~"), fallback)
    return os.path.join(os.path.expanduser(base), "sesame")


def data_dir(env=None):
    env = os.environ if env is None else env
    return _env_dir("SESAME_DATA_DIR", "XDG_DATA_HOME", os.path.join(".local", "share"), env)


def config_dir(env=None):
    env = os.environ if env is None else env
    return _env_dir("SESAME_CONFIG_DIR", "XDG_CONFIG_HOME", ".config", env)


def index_path(env=None):
    return os.path.join(data_dir(env), "index.sqlite")


def config_path(env=None):
    return os.path.join(config_dir(env), "config.jsonc")


def expand_path(p):
    """`~` and $VARS expand in configured paths, as they would in a shell."""
    return os.path.abspath(os.path.expanduser(os.path.expandvars(p)))


def jsonc_to_json(text):
    """Blank out // and /* */ comments and trailing commas, keeping every newline where it was.

    The output has the same line structure as the input, so json's error positions still point at
    the user's line. Text inside strings (a URL with //, a path) is left alone.
    """
    out = []
    i, n = 0, len(text)
    pending_comma = None  # index in `out` of a comma that is trailing if only space/comments follow
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            pending_comma = None
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == ",":
            pending_comma = len(out)
            out.append(c)
            i += 1
        elif c in "]}" and pending_comma is not None:
            out[pending_comma] = " "
            pending_comma = None
            out.append(c)
            i += 1
        else:
            if not c.isspace():
                pending_comma = None
            out.append(c)
            i += 1
    return "".join(out)


def load_jsonc(path):
    """Read a JSONC file; a syntax error names the file and the line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise ConfigError("%s: not UTF-8 text" % path)
    except OSError as e:
        raise ConfigError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        return json.loads(jsonc_to_json(text))
    except json.JSONDecodeError as e:
        raise ConfigError("%s: line %d: invalid JSONC: %s" % (path, e.lineno, e.msg))


class Source:
    """One place to look for sessions: a parser and a root folder or file."""

    def __init__(self, parser, path, origin):
        self.parser, self.path, self.origin = parser, path, origin

    def as_json(self):
        return {"parser": self.parser.id, "path": self.path, "origin": self.origin,
                "exists": os.path.exists(self.path)}


def load_config(env=None):
    """The config file as a dict ({} when there is none), validated enough to trust its shape."""
    path = config_path(env)
    if not os.path.exists(path):
        return {}, None
    cfg = load_jsonc(path)
    if not isinstance(cfg, dict):
        raise ConfigError("%s: the config must be a JSON object" % path)
    return cfg, path


def resolve_sources(cfg, cfg_path, env=None):
    """The sources to index: from the config when it names any, else every agent's default place."""
    env = os.environ if env is None else env
    entries = []
    if "sources" in cfg:
        if not isinstance(cfg["sources"], list):
            raise ConfigError('%s: "sources" must be a list of {"parser", "path"} objects' % cfg_path)
        for i, s in enumerate(cfg["sources"]):
            if not isinstance(s, dict) or not isinstance(s.get("path"), str) or not isinstance(s.get("parser"), str):
                raise ConfigError('%s: sources[%d] needs a "parser" and a "path" (strings)' % (cfg_path, i))
            entries.append((s["parser"], s["path"]))
    for p in cfg.get("piSessionPaths") or []:  # the older form, pi only
        if not isinstance(p, str):
            raise ConfigError('%s: "piSessionPaths" must be a list of strings' % cfg_path)
        entries.append(("pi", p))
    if entries:
        sources = []
        for parser_id, raw in entries:
            parser = PARSERS.get(parser_id)
            if parser is None:
                raise ConfigError("%s: unknown parser %r (known: %s)" % (cfg_path, parser_id, ", ".join(PARSERS)))
            path = expand_path(raw)
            if not os.path.exists(path):
                raise ConfigError("%s: source path does not exist: %s" % (cfg_path, path))
            sources.append(Source(parser, path, "config"))
        return sources
    sources = []
    for parser in PARSERS.values():
        for root in parser.default_roots(env):
            if os.path.exists(root):
                sources.append(Source(parser, root, "discovered"))
    return sources


# ==================================================================================================
# Time
# ==================================================================================================

_ISO_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"\s*(Z|z|[+-]\d{2}:?\d{2})?$")


def parse_time(value):
    """Any timestamp agents write -> aware UTC datetime, or None.

    Numbers are epoch seconds or milliseconds (told apart by magnitude); strings are ISO 8601 with
    `Z`, an offset, or no zone (then local time, as Aider and file names write it).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        if v > 1e14:      # microseconds
            v /= 1e6
        elif v > 1e11:    # milliseconds
            v /= 1e3
        try:
            return datetime.datetime.fromtimestamp(v, datetime.timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    s = value.strip()
    if re.fullmatch(r"\d{9,16}(\.\d+)?", s):
        return parse_time(float(s))
    m = _ISO_RE.match(s)
    if not m:
        return None
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    try:
        dt = datetime.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(sec or 0),
                               int((frac or "0")[:6].ljust(6, "0")))
    except ValueError:
        return None
    if tz is None:
        return dt.astimezone(datetime.timezone.utc)  # naive = local time
    if tz in ("Z", "z"):
        return dt.replace(tzinfo=datetime.timezone.utc)
    sign = 1 if tz[0] == "+" else -1
    tz = tz[1:].replace(":", "")
    off = datetime.timedelta(hours=int(tz[:2]), minutes=int(tz[2:]))
    return dt.replace(tzinfo=datetime.timezone(sign * off)).astimezone(datetime.timezone.utc)


def iso(dt):
    """The one stored and printed form: ISO 8601 UTC with milliseconds and Z (sorts as text)."""
    if dt is None:
        return None
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (dt.microsecond // 1000)


_CANONICAL_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")


def norm_time(value):
    """Any timestamp -> the stored ISO form, or None. The common case (already canonical, as pi and
    Claude Code write it) is recognised without parsing: it is most of indexing's timestamps."""
    if isinstance(value, str) and _CANONICAL_TS.match(value):
        return value
    return iso(parse_time(value))


def parse_when(text, now=None):
    """A --after/--before value -> aware UTC datetime. Relative forms count back from now."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    t = text.strip().lower()
    local_midnight = datetime.datetime.now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
    if t == "today":
        return local_midnight.astimezone(datetime.timezone.utc)
    if t == "yesterday":
        return (local_midnight - datetime.timedelta(days=1)).astimezone(datetime.timezone.utc)
    m = re.fullmatch(r"(\d+)\s*([hdwmy])", t)
    if m:
        n, unit = int(m.group(1)), m.group(2)
        days = {"h": n / 24.0, "d": n, "w": 7 * n, "m": 30 * n, "y": 365 * n}[unit]
        try:
            return now - datetime.timedelta(days=days)
        except OverflowError:
            raise UsageError("date out of range: %r" % text)
    dt = parse_time(text.strip())
    if dt is None or not re.match(r"^\d{4}-\d{2}-\d{2}", text.strip()):
        raise UsageError("cannot read the date %r (use 7d, 2w, 3m, 1y, 12h, today, yesterday, "
                         "YYYY-MM-DD or an ISO timestamp)" % text)
    return dt


# ==================================================================================================
# Session model: what every parser returns
# ==================================================================================================


class Chunk:
    """One searchable piece of a session: a message, a tool call with its result, a summary."""

    __slots__ = ("kind", "text", "role", "tool", "path", "ts")

    def __init__(self, kind, text, role=None, tool=None, path=None, ts=None):
        self.kind, self.text, self.role, self.tool, self.path, self.ts = kind, text, role, tool, path, ts


class Session:
    """A conversation as parsers hand it to the indexer."""

    def __init__(self, agent, session_id, path):
        self.agent, self.session_id, self.path = agent, session_id, path
        self.cwd = self.name = self.created = self.modified = self.parent = None
        self.chunks = []
        self.checkpoint = None   # resumable parsers: where to go on ({"offset", "seq", "state"})
        self.complete = True     # False when a resumable parse stopped at its byte limit

    def add(self, kind, text, **kw):
        text = cap_text(text.strip(), CHUNK_CAP) if text else ""
        if text:
            self.chunks.append(Chunk(kind, text, **kw))

    def touch(self, ts):
        """Record activity at ts (already normalised): widens created..modified."""
        if ts:
            if self.created is None or ts < self.created:
                self.created = ts
            if self.modified is None or ts > self.modified:
                self.modified = ts


class ParseReport:
    """What a parser noticed while reading one file: skipped lines and why."""

    def __init__(self):
        self.skipped = {}

    def skip(self, reason, n=1):
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    @property
    def skipped_lines(self):
        return sum(self.skipped.values())


class NotASessionFile(Exception):
    """Raised by a parser for a file that is not its format (reported, never fatal)."""


def cap_text(text, cap, head_share=0.75):
    """Keep the head and the tail of a long text and say how much of the middle was dropped."""
    if len(text) <= cap:
        return text
    head = int(cap * head_share)
    tail = cap - head
    return "%s\n[... %d characters dropped ...]\n%s" % (text[:head], len(text) - cap, text[-tail:])


def tool_text(name, args=None, output=None, is_error=False):
    """The structured text of a tool call: its name, its arguments, then what it printed."""
    lines = ["tool: %s" % name]
    if isinstance(args, dict):
        for k, v in args.items():
            if v is None or v == "":
                continue
            if not isinstance(v, str):
                v = json.dumps(v, ensure_ascii=False)
            lines.append("%s: %s" % (k, cap_text(v, FIELD_CAP)))
    elif isinstance(args, str) and args:
        lines.append("input: %s" % cap_text(args, FIELD_CAP))
    if output:
        lines.append("error:" if is_error else "output:")
        lines.append(cap_text(output, TOOL_OUTPUT_CAP))
    return "\n".join(lines)


PATH_ARG_KEYS = ("path", "file_path", "filePath", "notebook_path", "file", "filename", "target_file")


def tool_path(args):
    """The file a tool call touched, when its arguments say so."""
    if isinstance(args, dict):
        for k in PATH_ARG_KEYS:
            v = args.get(k)
            if isinstance(v, str) and v:
                return v
    return None


def text_of(content, image_note=False):
    """Text of a message content that is a string or a list of blocks; images are never indexed."""
    if isinstance(content, str):
        return content
    parts = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text"):
                t = block.get("text")
                if isinstance(t, str):
                    parts.append(t)
    return "\n".join(parts)


# ==================================================================================================
# Parsers: reading helpers, the registry, then one section per agent
# ==================================================================================================


def read_head(path, n=4096):
    with open(path, "rb") as f:
        return f.read(n)


_json_decode = json.JSONDecoder().decode  # str in, no encoding sniffing per line


def iter_jsonl(path, report, start=0):
    """Yield (offset_after_line, object) for each JSON object line of a file, from byte `start`.

    Never loads the file whole. Blank lines are ignored; lines that are not JSON objects, invalid
    UTF-8, over MAX_LINE_BYTES, or an unfinished last line (an agent still writing) are skipped and
    counted in `report`, never fatal.
    """
    with open(path, "rb") as f:
        f.seek(start)
        offset = start
        while True:
            line = f.readline(MAX_LINE_BYTES)
            if not line:
                return
            if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of the huge line
                    offset += len(line)
                    line = f.readline(1 << 20)
                offset += len(line)
                report.skip("line too long")
                continue
            if not line.endswith(b"\n"):
                report.skip("unfinished last line")
                return
            offset += len(line)
            if not line.strip():
                continue
            try:
                obj = _json_decode(line.decode("utf-8"))
            except ValueError:  # JSONDecodeError and UnicodeDecodeError
                report.skip("malformed line")
                continue
            if not isinstance(obj, dict):
                report.skip("malformed line")
                continue
            yield offset, obj


def first_json_line(path, limit=65536):
    """The first non-blank line of a file parsed as JSON, or None (a cheap format check)."""
    try:
        head = read_head(path, limit)
    except OSError:
        return None
    for raw in head.split(b"\n"):
        if raw.strip():
            try:
                obj = json.loads(raw)
            except ValueError:
                return None
            return obj if isinstance(obj, dict) else None
    return None


def walk_files(root, match, max_depth, skip_dirs=()):
    """Files under root (or root itself) for which match(name) holds, at most max_depth folders down.

    Sorted, so that runs are reproducible; symlinked folders are not followed (no loops).
    """
    if os.path.isfile(root):
        return [root] if match(os.path.basename(root)) else []
    found = []
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if depth < max_depth and e.name not in skip_dirs:
                        stack.append((e.path, depth + 1))
                elif e.is_file() and match(e.name):
                    found.append(e.path)
            except OSError:
                continue
    found.sort()
    return found


def open_agent_db(path, attempts=5):
    """Open an agent's SQLite store strictly read-only.

    With a -wal file beside it the newest rows live there, so it is opened `mode=ro` (which reads the
    WAL); without one, `immutable=1` reads the file without taking locks or creating a -shm file in
    the agent's folder. A store that is locked (the agent is writing) is retried briefly; after that
    the OSError raised here makes the indexer skip the file with a warning and retry next run.
    """
    from urllib.parse import quote
    mode = "mode=ro" if os.path.exists(path + "-wal") else "mode=ro&immutable=1"
    uri = "file:%s?%s" % (quote(os.path.abspath(path)), mode)
    last = None
    for attempt in range(attempts):
        try:
            con = sqlite3.connect(uri, uri=True, timeout=1.0)
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return con
        except sqlite3.DatabaseError as e:
            last = e
            if "locked" not in str(e) and "busy" not in str(e):
                break
            time.sleep(0.2 * (attempt + 1))
    raise OSError(errno.EIO, "cannot read SQLite store (%s)" % last)


class Parser:
    """What every agent's parser provides. Subclasses set `id`, `label` and `version`.

    id            parser id used in the config, in --agent and in the JSON
    version       bump when the parser changes what it produces: its files are then re-indexed
    default_roots where the agent keeps sessions when nothing is configured
    list_files    the session files under one root
    parse         one file -> Sessions (raise NotASessionFile for a file of another format)
    """

    id = label = ""
    version = 1
    # A resumable parser reads append-only files and can stop and restart at a "clean" line (one
    # after which no chunk is waiting for more lines, e.g. a tool call for its result):
    # parse(path, report, resume=checkpoint, limit=bytes) -> sessions whose `checkpoint` says where
    # to go on. The indexer uses it both to read only the bytes appended since the last run and to
    # read a huge file in slices of bounded memory; both give exactly what one full parse gives.
    resumable = False

    def default_roots(self, env):
        return []

    def list_files(self, root):
        return []

    def parse(self, path, report):
        raise NotImplementedError

    def resume_command(self, session):
        return None


PARSERS = {}


def register(cls):
    PARSERS[cls.id] = cls()
    return cls


# -------------------------------------------------------------------------------------------------
# pi (badlogic/pi-mono): ~/.pi/agent/sessions/--<cwd>--/<timestamp>_<id>.jsonl, formats.md §15
# -------------------------------------------------------------------------------------------------


@register
class PiParser(Parser):
    """pi session files, versions 1 to 3.

    The header (first line) carries id, cwd and creation time; the name is the latest non-empty
    `session_info`. Every branch of the tree is indexed (an abandoned branch is still something the
    user did). Tool calls are joined to their results by tool call id.
    """

    id, label, version = "pi", "pi", 1

    def default_roots(self, env):
        agent_dir = env.get("PI_CODING_AGENT_DIR")
        agent_dir = os.path.expanduser(agent_dir) if agent_dir else os.path.join(os.path.expanduser("~"), ".pi", "agent")
        return [os.path.join(agent_dir, "sessions")]

    def list_files(self, root):
        # Files sit in one folder per cwd, or directly in the root (pi --session-dir). Deeper files
        # belong to extensions (sub-agent artifacts) and are not sessions of their own.
        return walk_files(root, lambda n: n.endswith(".jsonl"), max_depth=1)

    resumable = True

    def parse(self, path, report, resume=None, limit=None):
        """Parse from the start, or from a checkpoint of an earlier parse (appended lines only).

        Stops after `limit` bytes at the next clean line (see Parser.resumable) and always records
        the last clean checkpoint in `s.checkpoint`.
        """
        header = first_json_line(path)
        if not header or header.get("type") != "session" or not isinstance(header.get("id"), str):
            raise NotASessionFile("no pi session header")
        s = Session(self.id, header["id"], path)
        s.cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else None
        s.parent = header.get("parentSession") or header.get("branchedFrom")
        header_ts = norm_time(header.get("timestamp"))
        # State carried across checkpoints: the name so far and the latest user/assistant activity.
        state = dict(resume["state"]) if resume else {"name": None, "last": None}
        start = resume["offset"] if resume else 0
        calls = {}          # tool call id -> (index of its chunk in s.chunks, name, args), until its result
        pending_since = 0   # line number at which `calls` last became non-empty
        checkpoint = (start, 0, dict(state))
        s.complete = True
        for line_no, (offset, e) in enumerate(iter_jsonl(path, report, start)):
            etype = e.get("type")
            if etype == "message":
                m = e.get("message")
                if not isinstance(m, dict):
                    report.skip("malformed entry")
                    continue
                role = m.get("role")
                ts = norm_time(e.get("timestamp"))
                if role in ("user", "assistant"):
                    # pi's "modified": the latest user/assistant message time (epoch ms), kept as a
                    # number and turned into ISO once, at the end.
                    mts = m.get("timestamp")
                    if not isinstance(mts, (int, float)) or isinstance(mts, bool):
                        mts = parse_time(ts)
                        mts = mts.timestamp() * 1000 if mts else None
                    if mts is not None and (state["last"] is None or mts > state["last"]):
                        state["last"] = mts
                had_calls = bool(calls)
                self._message(s, m, role, ts, calls, report)
                if calls and not had_calls:
                    pending_since = line_no
            elif etype == "compaction" or etype == "branch_summary":
                if isinstance(e.get("summary"), str):
                    s.add("summary", e["summary"], role=etype, ts=norm_time(e.get("timestamp")))
            elif etype == "custom_message":
                s.add("custom", text_of(e.get("content")), role="custom", ts=norm_time(e.get("timestamp")))
            elif etype == "session_info":
                name = e.get("name")
                if isinstance(name, str) and name.strip():
                    state["name"] = name.strip()
            elif etype in ("model_change", "thinking_level_change", "custom", "label", "session"):
                pass  # settings and extension state: nothing a user would search for
            else:
                report.skip("unknown entry type")
            if calls and line_no - pending_since > PENDING_CALL_LINES:
                calls.clear()  # a call whose result never came: keep it without output
            if not calls:
                checkpoint = (offset, len(s.chunks), dict(state))
                if limit and offset - start >= limit:
                    s.complete = False
                    break
        offset, n_chunks, ck_state = checkpoint
        s.checkpoint = {"offset": offset, "seq": (resume["seq"] if resume else 0) + n_chunks, "state": ck_state}
        s.name = state["name"]
        s.created = header_ts
        s.modified = norm_time(state["last"]) if state["last"] is not None else header_ts
        if s.created is None:
            s.created = s.modified = iso(datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc))
        return [s]

    @staticmethod
    def _message(s, m, role, ts, calls, report):
        content = m.get("content")
        if role == "user":
            s.add("user", text_of(content), role="user", ts=ts)
        elif role == "assistant":
            texts, thinking, tool_calls = [], [], []
            for block in content if isinstance(content, list) else [content]:
                if isinstance(block, str):
                    texts.append(block)
                elif not isinstance(block, dict):
                    continue
                elif block.get("type") == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
                    thinking.append(block["thinking"])
                elif block.get("type") == "toolCall":
                    tool_calls.append(block)
            if thinking:
                s.add("thinking", "\n".join(thinking), role="assistant", ts=ts)
            if texts:
                s.add("assistant", "\n".join(texts), role="assistant", ts=ts)
            for block in tool_calls:  # after the text that announced them, as the agent showed them
                name, args = str(block.get("name") or "tool"), block.get("arguments")
                s.add("tool", tool_text(name, args), role="assistant", tool=name, path=tool_path(args), ts=ts)
                if block.get("id"):
                    calls[block["id"]] = (len(s.chunks) - 1, name, args)
        elif role == "toolResult":
            output = text_of(content)
            call = calls.pop(m.get("toolCallId"), None)
            if call:
                idx, name, args = call
                s.chunks[idx].text = tool_text(name, args, output, bool(m.get("isError")))
            else:
                name = str(m.get("toolName") or "tool")
                s.add("tool", tool_text(name, None, output, bool(m.get("isError"))), role="tool", tool=name, ts=ts)
        elif role == "bashExecution":
            args = {"command": m.get("command")}
            s.add("tool", tool_text("bash", args, m.get("output") or ""), role="user", tool="bash", ts=ts)
        elif role in ("custom", "hookMessage"):
            s.add("custom", text_of(content), role="custom", ts=ts)
        else:
            report.skip("unknown message role")

    def resume_command(self, session):
        return "pi --session %s" % shell_quote(session["path"])


def shell_quote(s):
    return s if re.fullmatch(r"[A-Za-z0-9_./:@%+=,-]+", s or "") else "'" + (s or "").replace("'", "'\\''") + "'"


# ==================================================================================================
# Index store: schema, connection settings, FTS5 probe
# ==================================================================================================
#
# The index is a plain table of chunks plus one FTS5 table that ranks sessions:
#   chunks    every chunk of every session, in order (`seq`); the text is stored zlib-compressed
#             when that saves space: it is read only to show snippets and sessions.
#   docs_fts  one row per session "part" (consecutive chunks, up to PART_CHARS), contentless, with
#             a column per kind of text. Ranking whole sessions this way lets words spread over a
#             session's messages count together, and the column weights rank talk above tool output.
#             A contentless row is deleted by giving FTS5 its exact old text, rebuilt from `chunks`
#             (doc_columns serves both directions).
# Snippets and best matching chunks are found in Python inside the best matching part (Matcher),
# which costs far less than a second, per-chunk FTS index would at index time and on disk.
# Only plain FTS5 features are used, so an index opens with any SQLite >= 3.31 (fts5.md §1).

TOKENIZE = "porter unicode61 remove_diacritics 2"

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, parser TEXT NOT NULL,
    parser_version INTEGER, size INTEGER, mtime_ns INTEGER, status TEXT, reason TEXT,
    skipped INTEGER DEFAULT 0, indexed_at TEXT, checkpoint TEXT);
CREATE TABLE sessions(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL, agent TEXT NOT NULL,
    session_id TEXT NOT NULL, path TEXT, cwd TEXT, name TEXT, created TEXT, modified TEXT,
    parent TEXT, chunk_count INTEGER);
CREATE INDEX sessions_file ON sessions(file_id);
CREATE INDEX sessions_sid ON sessions(session_id);
CREATE TABLE chunks(id INTEGER PRIMARY KEY, session INTEGER NOT NULL, seq INTEGER NOT NULL,
    kind TEXT NOT NULL, role TEXT, tool TEXT, path TEXT, ts TEXT, text NOT NULL);
CREATE INDEX chunks_session ON chunks(session, seq);
CREATE TABLE docs(id INTEGER PRIMARY KEY, session INTEGER NOT NULL, first_seq INTEGER, last_seq INTEGER);
CREATE INDEX docs_session ON docs(session, first_seq);
CREATE TABLE touched(session INTEGER NOT NULL, tool TEXT, path TEXT);
CREATE INDEX touched_session ON touched(session);
CREATE VIRTUAL TABLE docs_fts USING fts5(name, talk, tools, aside, content='', tokenize='%s');
""" % TOKENIZE

FTS_HASHSIZE = 32 * 1024 * 1024  # bigger in-memory batches before a flush: faster bulk builds


def check_fts5(con):
    """FTS5 is the one hard requirement; say plainly what to do when this Python's SQLite lacks it."""
    try:
        con.execute("CREATE VIRTUAL TABLE temp._sesame_probe USING fts5(x, tokenize='%s')" % TOKENIZE)
        con.execute("DROP TABLE temp._sesame_probe")
    except sqlite3.OperationalError as e:
        raise SesameError(
            "this Python's SQLite %s lacks the FTS5 full-text module (%s)" % (sqlite3.sqlite_version, e),
            hint="run sesame with a Python whose sqlite3 has FTS5: python.org or Homebrew Python, "
                 "Debian/Ubuntu/Fedora python3, or `uv python install` (builds from 2025-07-12 on)")


def _is_corrupt(exc):
    msg = str(exc).lower()
    return any(s in msg for s in ("malformed", "not a database", "corrupt", "fts5 file format"))


class Store:
    """The index database. Open with Store.open(); every write goes through `transaction()`."""

    def __init__(self, con, path):
        self.con, self.path = con, path

    @classmethod
    def open(cls, path, create=True):
        folder = os.path.dirname(path)
        if not os.path.exists(path):
            if not create:
                return None
            try:
                os.makedirs(folder, mode=0o700, exist_ok=True)
            except OSError as e:
                raise IndexError_("cannot create the data directory %s: %s" % (folder, e.strerror or e))
        old_umask = os.umask(0o077)  # the index, its -wal and -shm: readable by the owner only
        try:
            return cls._connect(path)
        finally:
            os.umask(old_umask)

    @classmethod
    def _connect(cls, path):
        try:
            con = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise IndexError_("cannot open the index %s: %s" % (path, e))
        store = cls(con, path)
        try:
            check_fts5(con)
            con.execute("PRAGMA page_size=16384")  # takes effect on a new file only: faster FTS builds
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute("PRAGMA temp_store=MEMORY")
            con.execute("PRAGMA cache_size=-32768")
            store._migrate()
        except sqlite3.DatabaseError as e:
            con.close()
            if _is_corrupt(e):
                return cls._rebuild_corrupt(path, e)
            if "readonly" in str(e).lower() or "read-only" in str(e).lower():
                raise IndexError_("the index %s is read-only: %s" % (path, e))
            raise IndexError_("cannot open the index %s: %s" % (path, e))
        return store

    @classmethod
    def _rebuild_corrupt(cls, path, exc):
        """A corrupt index is set aside (never deleted) and rebuilt: the session files are the truth."""
        aside = "%s.corrupt-%d" % (path, int(time.time()))
        try:
            os.replace(path, aside)
            for ext in ("-wal", "-shm"):
                if os.path.exists(path + ext):
                    os.replace(path + ext, aside + ext)
        except OSError as e:
            raise IndexError_("the index %s is corrupt (%s) and cannot be moved aside: %s" % (path, exc, e),
                              hint="delete it and run `sesame index --full`")
        _stderr("sesame: the index was corrupt (%s); moved it to %s and rebuilding" % (exc, aside))
        return cls._connect(path)

    def _migrate(self):
        con = self.con
        has_meta = con.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone()
        version = None
        if has_meta:
            row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else None
        if version == SCHEMA_VERSION:
            return
        if version is not None and version > SCHEMA_VERSION:
            raise IndexError_("the index %s was written by a newer Sesame (schema %d; this one reads %d)"
                              % (self.path, version, SCHEMA_VERSION),
                              hint="upgrade sesame, or point SESAME_DATA_DIR elsewhere")
        with self.transaction():
            self._drop_all()
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    con.execute(stmt)
            con.execute("INSERT INTO docs_fts(docs_fts, rank) VALUES('hashsize', %d)" % FTS_HASHSIZE)
            self.set_meta("schema_version", SCHEMA_VERSION)
            self.set_meta("created", iso(now_utc()))

    def _drop_all(self):
        rows = self.con.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table','view') "
                                "AND name NOT LIKE 'sqlite_%'").fetchall()
        # Dropping an FTS5 table drops its shadow tables; skip those to avoid dropping them twice.
        virtual = [n for t, n in rows if n in ("chunks_fts", "docs_fts")]  # chunks_fts: schema 1
        for name in virtual:
            self.con.execute("DROP TABLE IF EXISTS %s" % name)
        for _, name in rows:
            if name not in virtual and not name.startswith(("chunks_fts_", "docs_fts_")):
                self.con.execute("DROP TABLE IF EXISTS %s" % name)

    def reset(self):
        """Empty the index (for --full): the schema is recreated from nothing."""
        with self.transaction():
            self._drop_all()
        self._migrate()

    def transaction(self):
        return _Transaction(self.con)

    def meta(self, key, default=None):
        row = self.con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key, value):
        self.con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, str(value)))

    def size_bytes(self):
        return sum(os.path.getsize(self.path + ext) for ext in ("", "-wal") if os.path.exists(self.path + ext))

    def close(self):
        try:
            self.con.close()
        except sqlite3.Error:
            pass


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error (so an interrupted write leaves no trace)."""

    def __init__(self, con):
        self.con = con

    def __enter__(self):
        self.con.execute("BEGIN IMMEDIATE")
        return self.con

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.con.execute("COMMIT")
        else:
            try:
                self.con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        return False


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


# ==================================================================================================
# Indexer: discover files, decide what changed, parse, write in transactions
# ==================================================================================================


COMPRESS_MIN = 200  # shorter texts are stored as they are: zlib would not make them smaller


def pack(text):
    return zlib.compress(text.encode("utf-8"), 1) if len(text) >= COMPRESS_MIN else text


def unpack(value):
    return zlib.decompress(value).decode("utf-8") if isinstance(value, bytes) else value


def doc_columns(name, chunk_rows):
    """The text of one docs_fts row: (name, talk, tools, aside) from (kind, text) rows.

    Used both to insert and to delete a row; the two must produce the same text to the byte.
    """
    cols = {"talk": [], "tools": [], "aside": []}
    for kind, text in chunk_rows:
        cols[KIND_COLUMN.get(kind, "aside")].append(text)
    return (name or "", "\n\n".join(cols["talk"]), "\n\n".join(cols["tools"]), "\n\n".join(cols["aside"]))


def _part_rows(con, sid, first, last):
    return [(k, unpack(t)) for k, t in con.execute(
        "SELECT kind, text FROM chunks WHERE session=? AND seq BETWEEN ? AND ? ORDER BY seq", (sid, first, last))]


def delete_parts(con, sid, name, from_seq=0):
    """Delete the session's parts that hold chunks from seq `from_seq` on (all parts by default)."""
    for doc_id, first, last in con.execute(
            "SELECT id, first_seq, last_seq FROM docs WHERE session=? AND (last_seq >= ? OR first_seq >= ?)",
            (sid, from_seq, from_seq)).fetchall():
        con.execute("INSERT INTO docs_fts(docs_fts, rowid, name, talk, tools, aside) VALUES('delete', ?, ?, ?, ?, ?)",
                    (doc_id,) + doc_columns(name, _part_rows(con, sid, first, last)))
        con.execute("DELETE FROM docs WHERE id=?", (doc_id,))


def cut_parts(rows, start_seq=0):
    """Cut (seq, kind, text) rows into parts of at most PART_CHARS: yields (first, last, [(kind, text)]).

    Parts are cut greedily from the session's first chunk, so cutting again from the first chunk of
    an existing part gives exactly the parts a full rebuild would: appends only touch the tail. A
    session without chunks still gets one (empty) part, so that its name is searchable.
    """
    part, size, first, last = [], 0, start_seq, start_seq - 1
    for seq, kind, text in rows:
        if part and size + len(text) > PART_CHARS:
            yield first, last, part
            part, size, first = [], 0, seq
        part.append((kind, text))
        size += len(text)
        last = seq
    if part or start_seq == 0:
        yield first, last, part


def insert_parts(con, sid, parts):
    """Index (first, last, columns) parts of one session in docs_fts."""
    for first, last, cols in parts:
        doc = con.execute("INSERT INTO docs(session, first_seq, last_seq) VALUES(?,?,?)", (sid, first, last)).lastrowid
        con.execute("INSERT INTO docs_fts(rowid, name, talk, tools, aside) VALUES(?,?,?,?,?)", (doc,) + cols)


def build_parts(con, sid, name, from_seq):
    """Re-cut and index the session's parts from chunk `from_seq` (a part start) on, from the index."""
    rows = ((seq, kind, unpack(text)) for seq, kind, text in con.execute(
        "SELECT seq, kind, text FROM chunks WHERE session=? AND seq >= ? ORDER BY seq", (sid, from_seq)))
    insert_parts(con, sid, [(f, l, doc_columns(name, p)) for f, l, p in cut_parts(rows, from_seq)])


class Prepared:
    """A parsed session made ready to write: plain values only (cheap to send from a worker), the
    chunk text compressed, and its parts already cut when it starts at chunk 0."""

    __slots__ = ("meta", "rows", "touched", "parts", "complete", "count")

    def __init__(self, s, fresh):
        self.meta = (s.agent, s.session_id, s.path, s.cwd, s.name, s.created, s.modified, s.parent)
        self.rows = [(c.kind, c.role, c.tool, c.path, c.ts, pack(c.text)) for c in s.chunks]
        self.touched = sorted({(c.tool or "", c.path or "") for c in s.chunks if c.kind == "tool"})
        self.parts = None
        if fresh:
            self.parts = [(f, l, doc_columns(s.name, p))
                          for f, l, p in cut_parts((i, c.kind, c.text) for i, c in enumerate(s.chunks))]
        self.complete = s.complete
        self.count = len(s.chunks)

    def __getstate__(self):
        return [getattr(self, k) for k in self.__slots__]

    def __setstate__(self, state):
        for k, v in zip(self.__slots__, state):
            setattr(self, k, v)


def delete_sessions(con, session_ids):
    """Remove sessions with their chunks and their ranking rows."""
    for sid in session_ids:
        row = con.execute("SELECT name FROM sessions WHERE id=?", (sid,)).fetchone()
        if row is None:
            continue
        delete_parts(con, sid, row[0])
        for table, col in (("chunks", "session"), ("touched", "session"), ("sessions", "id")):
            con.execute("DELETE FROM %s WHERE %s=?" % (table, col), (sid,))


def write_session(con, file_id, prep, existing=None, from_seq=0):
    """Write a prepared session, or (existing = its row id) replace its chunks from seq `from_seq` on.

    Returns the session's row id. Only the parts from the one holding `from_seq` are rebuilt, and
    all of them when the name changed (the name is indexed with every part).
    """
    meta = prep.meta
    name = meta[4]
    if existing is None:
        sid = con.execute("INSERT INTO sessions(file_id, agent, session_id, path, cwd, name, created, modified, "
                          "parent, chunk_count) VALUES(?,?,?,?,?,?,?,?,?,0)", (file_id,) + meta).lastrowid
        part_from = 0
    else:
        sid = existing
        old_name = con.execute("SELECT name FROM sessions WHERE id=?", (sid,)).fetchone()[0]
        row = con.execute("SELECT max(first_seq) FROM docs WHERE session=? AND first_seq <= ?", (sid, from_seq)).fetchone()
        part_from = 0 if old_name != name or row[0] is None else row[0]
        delete_parts(con, sid, old_name, part_from)
        con.execute("DELETE FROM chunks WHERE session=? AND seq >= ?", (sid, from_seq))
        con.execute("UPDATE sessions SET agent=?, session_id=?, path=?, cwd=?, name=?, created=?, modified=?, parent=? "
                    "WHERE id=?", meta + (sid,))
    con.executemany("INSERT INTO chunks(session, seq, kind, role, tool, path, ts, text) VALUES(?,?,?,?,?,?,?,?)",
                    [(sid, from_seq + i) + r for i, r in enumerate(prep.rows)])
    con.execute("UPDATE sessions SET chunk_count=? WHERE id=?", (from_seq + len(prep.rows), sid))
    if existing is None and prep.parts is not None:
        insert_parts(con, sid, prep.parts)
    else:
        build_parts(con, sid, name, part_from)
    touched = set(prep.touched)
    if existing is not None:
        touched -= set(con.execute("SELECT tool, path FROM touched WHERE session=?", (sid,)).fetchall())
    con.executemany("INSERT INTO touched(session, tool, path) VALUES(?,?,?)", [(sid, t, p) for t, p in sorted(touched)])
    return sid


class IndexSummary:
    """What one index run did; printed as one line, or as JSON with --json."""

    def __init__(self):
        self.seen = self.indexed = self.unchanged = self.removed = 0
        self.sessions = self.chunks = self.skipped_lines = 0
        self.problems = []   # {"path", "reason"}: files not indexed (not a session file, unreadable, ...)
        self.seconds = 0.0

    def problem(self, path, reason):
        self.problems.append({"path": path, "reason": reason})

    def as_json(self):
        return {"filesSeen": self.seen, "filesIndexed": self.indexed, "filesUnchanged": self.unchanged,
                "filesRemoved": self.removed, "filesSkipped": len(self.problems), "sessions": self.sessions,
                "chunks": self.chunks, "linesSkipped": self.skipped_lines, "seconds": round(self.seconds, 3),
                "skipped": self.problems}

    def line(self):
        return ("indexed: %d files seen, %d indexed, %d unchanged, %d removed, %d not indexed; "
                "%d sessions, %d chunks; %d lines skipped; %.2fs"
                % (self.seen, self.indexed, self.unchanged, self.removed, len(self.problems),
                   self.sessions, self.chunks, self.skipped_lines, self.seconds))


def discover(sources, summary):
    """Every session file of every source: [(path, parser, stat)], each path once (first source wins)."""
    found, seen = [], set()
    for src in sources:
        try:
            paths = src.parser.list_files(src.path)
        except OSError as e:
            summary.problem(src.path, "cannot list: %s" % (e.strerror or e))
            continue
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            try:
                st = os.stat(path)
            except OSError as e:
                summary.problem(path, "cannot stat: %s" % (e.strerror or e))
                continue
            found.append((path, src.parser, st))
    return found


BATCH_BYTES = 64 * 1024 * 1024   # commit after this much session data: bounded loss on interruption
BATCH_FILES = 2000
SLICE_BYTES = 8 * 1024 * 1024    # a resumable file is parsed this much at a time: bounded memory
TAIL_CHECK = 1024                # bytes before a checkpoint that must be unchanged to resume there


class Batch:
    """One open write transaction, committed every BATCH_BYTES of input or BATCH_FILES files.

    Whatever is committed is consistent (files rows are written with their sessions), so an
    interrupted run loses at most the open batch, and the next run picks up from there.
    """

    def __init__(self, store):
        self.store, self.bytes, self.files = store, 0, 0
        self.con = store.con
        self.con.execute("BEGIN IMMEDIATE")

    def done(self, nbytes, files=0):
        self.bytes += nbytes
        self.files += files
        if self.bytes >= BATCH_BYTES or self.files >= BATCH_FILES:
            self.commit()
            self.con.execute("BEGIN IMMEDIATE")

    def commit(self):
        self.store.set_meta("last_index", iso(now_utc()))
        self.con.execute("COMMIT")
        self.bytes = self.files = 0

    def rollback(self):
        try:
            self.con.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def plan_index(store, sources, summary):
    """Compare the files on disk with the index: (files to read [(path, parser, stat, row)], rows gone)."""
    files = discover(sources, summary)
    summary.seen = len(files)
    known = {row[1]: row for row in store.con.execute(
        "SELECT id, path, parser, parser_version, size, mtime_ns, checkpoint FROM files")}
    todo = []
    for path, parser, st in files:
        row = known.get(path)
        if (row and row[2] == parser.id and row[3] == parser.version and row[4] == st.st_size
                and row[5] == st.st_mtime_ns):
            summary.unchanged += 1
        else:
            todo.append((path, parser, st, row))
    present = {path for path, _, _ in files}
    return todo, [row for path, row in known.items() if path not in present]


def run_index(store, sources, full=False, progress=None):
    """Bring the index up to date with the sources. Files whose size and mtime are unchanged are not
    read; files that only grew are read from where the last run stopped; other changed files are
    re-parsed; vanished ones are removed."""
    t0 = time.monotonic()
    summary = IndexSummary()
    if full:
        store.reset()
    todo, gone = plan_index(store, sources, summary)
    total_bytes = sum(st.st_size for _, _, st, _ in todo) or 1
    batch = Batch(store)
    results = None
    try:
        for row in gone:
            delete_sessions(store.con, [r[0] for r in store.con.execute("SELECT id FROM sessions WHERE file_id=?", (row[0],))])
            store.con.execute("DELETE FROM files WHERE id=?", (row[0],))
        summary.removed = len(gone)
        jobs = [(path, parser, st, row, _resume_point(path, parser, st, row)) for path, parser, st, row in todo]
        results = parse_all(jobs, parallel=total_bytes >= PARALLEL_MIN_BYTES)
        done_bytes = 0
        for n, (job, result) in enumerate(zip(jobs, results), 1):
            index_file(batch, job, result, summary)
            batch.done(0, files=1)
            done_bytes += job[2].st_size
            if progress:
                progress(n, len(todo), done_bytes, total_bytes, time.monotonic() - t0)
        batch.commit()
    except BaseException:
        batch.rollback()
        raise
    finally:
        if results is not None:
            results.close()  # stops the worker processes, also when interrupted
    summary.seconds = time.monotonic() - t0
    return summary


def _fingerprint(path, offset):
    """Hashes of the file's first bytes and of the bytes just before `offset`: if both are unchanged,
    the file only grew since that offset was indexed."""
    with open(path, "rb") as f:
        head = f.read(min(TAIL_CHECK, offset))
        f.seek(max(0, offset - TAIL_CHECK))
        tail = f.read(min(TAIL_CHECK, offset))
    return hashlib.sha1(head).hexdigest()[:16] + hashlib.sha1(tail).hexdigest()[:16]


def _resume_point(path, parser, st, row):
    """The checkpoint to go on from when the file only grew since it was indexed, else None."""
    if row is None or not parser.resumable or not row[6] or row[2] != parser.id or row[3] != parser.version:
        return None
    try:
        ck = json.loads(row[6])
        if st.st_size >= ck["offset"] and _fingerprint(path, ck["offset"]) == ck["fingerprint"]:
            return ck
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def parse_file(path, parser_id, resume, limit):
    """Run a parser on one file (or one slice of it) and compress its chunks.

    Arguments and result are plain picklable values, so this can run in a worker process:
    (status, sessions or reason, skipped-lines dict, checkpoint). status is "ok", "skipped" (not a
    session file: recorded, so it is not retried until it changes) or "error" (left for next run).
    """
    parser = PARSERS[parser_id]
    report = ParseReport()
    try:
        if parser.resumable:
            sessions = parser.parse(path, report, resume=resume, limit=limit)
        else:
            sessions = parser.parse(path, report)
    except NotASessionFile as e:
        return "skipped", "not a %s session file (%s)" % (parser.label, e), report.skipped, None
    except OSError as e:
        return "error", "cannot read: %s" % (e.strerror or e), report.skipped, None
    except Exception as e:  # a parser bug must not stop the run; the file is reported instead
        return "error", "%s parser failed: %s: %s" % (parser_id, type(e).__name__, e), report.skipped, None
    prepared = [Prepared(s, fresh=resume is None) for s in sessions]
    checkpoint = None
    if parser.resumable and sessions and sessions[0].checkpoint:
        ck = sessions[0].checkpoint
        try:
            checkpoint = dict(ck, fingerprint=_fingerprint(path, ck["offset"]))
        except OSError as e:
            return "error", "cannot read: %s" % (e.strerror or e), report.skipped, None
    return "ok", prepared, report.skipped, checkpoint


def index_file(batch, job, result, summary):
    """Replace (or extend) what the index held for one file with its parse result.

    A bad file is reported, never fatal, and a file that cannot be read now keeps whatever was
    indexed from it before. A resumable file that only grew is extended from its checkpoint; one
    larger than SLICE_BYTES arrives in slices, each committed like an append.
    """
    path, parser, st, row, resume = job
    con = batch.con
    file_id = row[0] if row else None
    existing = None
    if resume and file_id is not None:
        r = con.execute("SELECT id FROM sessions WHERE file_id=?", (file_id,)).fetchone()
        existing = r[0] if r else None
    fresh = resume is None
    skipped_lines = 0
    while True:
        status, payload, skipped, checkpoint = result
        skipped_lines += sum(skipped.values())
        if status == "error":
            summary.problem(path, payload)
            return
        sessions = payload if status == "ok" else []
        if fresh and file_id is not None:
            delete_sessions(con, [r[0] for r in con.execute("SELECT id FROM sessions WHERE file_id=?", (file_id,))])
            fresh = False
        if file_id is None:
            file_id = con.execute("INSERT INTO files(path, parser) VALUES(?, ?)", (path, parser.id)).lastrowid
        for s in sessions:
            existing = write_session(con, file_id, s, existing=existing if resume else None,
                                     from_seq=resume["seq"] if resume else 0)
            summary.chunks += s.count
        complete = all(s.complete for s in sessions)
        # An unfinished file keeps size -1: the next run sees it as changed and resumes it.
        con.execute("UPDATE files SET parser=?, parser_version=?, size=?, mtime_ns=?, status=?, reason=?, skipped=?, "
                    "indexed_at=?, checkpoint=? WHERE id=?",
                    (parser.id, parser.version, st.st_size if complete else -1, st.st_mtime_ns,
                     "ok" if status == "ok" else "skipped", None if status == "ok" else payload,
                     skipped_lines, iso(now_utc()), json.dumps(checkpoint) if checkpoint else None, file_id))
        read_to = checkpoint["offset"] if checkpoint else st.st_size
        batch.done(read_to - (resume["offset"] if resume else 0))
        if complete:
            break
        resume = checkpoint
        result = parse_file(path, parser.id, resume, SLICE_BYTES)
    if status == "skipped":
        summary.problem(path, payload)
    summary.indexed += 1
    summary.sessions += len(sessions)
    summary.skipped_lines += skipped_lines


PARALLEL_MIN_BYTES = 16 * 1024 * 1024  # below this, starting a worker process costs more than it saves


def parse_all(jobs, parallel):
    """Parse results for jobs, in order. With `parallel`, parsing runs in worker processes (the
    machine's other cores) while the caller writes; a few results are kept ahead, never all."""
    args = [(path, parser.id, resume, SLICE_BYTES) for path, parser, _, _, resume in jobs]
    if not parallel:
        for a in args:
            yield parse_file(*a)
        return
    import multiprocessing
    from collections import deque
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    try:
        pool = ctx.Pool(max(1, min(4, os.cpu_count() or 2)))
    except (OSError, ImportError, ValueError):  # no semaphores or processes here: parse in-process
        for a in args:
            yield parse_file(*a)
        return
    try:
        pending, it = deque(), iter(args)
        for a in it:
            pending.append(pool.apply_async(parse_file, a))
            if len(pending) >= 16:
                break
        while pending:
            result = pending.popleft().get()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.apply_async(parse_file, nxt))
            yield result
    finally:
        pool.terminate()


class IndexLock:
    """One indexer at a time, across processes: an advisory lock on a file beside the index.

    SQLite transactions already keep the index consistent; the lock keeps two indexers from parsing
    the same files twice. Where fcntl does not exist (Windows) the transactions alone protect it.
    """

    def __init__(self, folder):
        self.path = os.path.join(folder, "index.lock")
        self.fd = None

    def acquire(self, wait_seconds):
        try:
            import fcntl
        except ImportError:
            return True
        old_umask = os.umask(0o077)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise IndexError_("cannot create the lock file %s: %s" % (self.path, e.strerror or e))
        finally:
            os.umask(old_umask)
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            if time.monotonic() >= deadline:
                os.close(self.fd)
                self.fd = None
                return False
            time.sleep(0.1)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


# ==================================================================================================
# Query: user text -> safe FTS5 expressions
# ==================================================================================================

MAX_QUERY_TERMS = 32
_TOKEN_CHAR = re.compile(r"[0-9A-Za-z]|[^\x00-\x7f]")


class Query:
    """A search box string, made safe for FTS5 (fts5.md §4).

    Every word becomes a quoted FTS5 string, so punctuation, keywords (AND, OR, NOT) and code
    (`parser.py`, `OPS-306`, `std::vector<int>`) are literal text; the tokenizer turns `parser.py`
    into the phrase "parser py", which is exactly how it was indexed. Three operators are offered on
    purpose: "exact phrase", prefix* (at least 2 characters) and -word (sessions without it).
    """

    def __init__(self, text):
        self.text = text
        self.terms, self.excluded = [], []
        self.words = []  # (text, is_prefix) of each term, for Matcher
        clean = re.sub(r"[\x00-\x1f\x7f]", " ", text)
        for m in re.finditer(r'(-?)"([^"]*)"|(\S+)', clean):
            if m.group(3) is None:
                neg, core, prefix = bool(m.group(1)), m.group(2), False
            else:
                word = m.group(3)
                neg = len(word) > 1 and word[0] == "-" and word[1].isalpha()
                core = word[1:] if neg else word
                prefix = core.endswith("*")
                core = core.rstrip("*")
                if prefix and len(_TOKEN_CHAR.findall(core)) < 2:
                    prefix = False
            if not _TOKEN_CHAR.search(core):
                continue
            term = '"%s"%s' % (core.replace('"', '""'), "*" if prefix else "")
            target = self.excluded if neg else self.terms
            if term not in target:
                target.append(term)
                if not neg:
                    self.words.append((core, prefix))
        self.terms, self.words = self.terms[:MAX_QUERY_TERMS], self.words[:MAX_QUERY_TERMS]
        if not self.terms:
            raise UsageError("nothing to search for in %r: give at least one word%s"
                             % (text, " that is not excluded" if self.excluded else ""))

    def stages(self):
        """FTS5 expressions from strict to loose: every word, all but one, any word. Sessions found
        by an earlier stage rank above those only a later one finds (fts5.md §4.3)."""
        t = self.terms
        out = [" AND ".join(t)]
        if 3 <= len(t) <= 8:
            out.append(" OR ".join("(%s)" % " AND ".join(t[:i] + t[i + 1:]) for i in range(len(t))))
        if len(t) >= 2:
            out.append(" OR ".join(t))
        return out



# Common English endings, stripped from query words so that Matcher finds the forms the porter
# stemmer conflates in the index ("tests" -> "test" finds "testing"). Longest first.
_SUFFIXES = ("ations", "ation", "ments", "ment", "ness", "ings", "ing", "ies", "ied", "ers", "er", "ed",
             "es", "ly", "s")


class Matcher:
    """Finds query words inside chunk text, to pick a session's best chunks and cut snippets.

    Ranking is FTS5's job; this only has to point at the right place, so it mimics the tokenizer
    roughly: case-insensitive, tokens of letters and digits, words matched from their start with
    any ending (a cheap stand-in for porter stemming), phrases as token sequences.
    """

    TOKEN = r"[^\W_]"

    def __init__(self, query):
        self.patterns = []
        for core, prefix in query.words:
            tokens = re.findall(r"[^\W_]+", core.lower())
            if not tokens:
                continue
            parts = [re.escape(self._stem(t)) for t in tokens]
            pat = "(?<!%s)%s%s*" % (self.TOKEN, "[\\W_]+".join(parts), self.TOKEN)
            self.patterns.append(re.compile(pat, re.IGNORECASE))

    @staticmethod
    def _stem(token):
        for suffix in _SUFFIXES:
            if token.endswith(suffix) and len(token) - len(suffix) >= 3:
                return token[:-len(suffix)]
        return token

    def spans(self, text):
        """[(start, end, term index)] of every match, in order."""
        out = []
        for i, pat in enumerate(self.patterns):
            out.extend((m.start(), m.end(), i) for m in pat.finditer(text))
        out.sort()
        return out

    def score(self, text):
        """Distinct query words found, then (a little) how often: a chunk with more words wins."""
        spans = self.spans(text)
        if not spans:
            return 0.0, spans
        distinct = len({i for _, _, i in spans})
        return distinct + min(len(spans), 20) / 100.0, spans

    @staticmethod
    def snippet(text, spans, width=SNIPPET_CHARS):
        """A window of about `width` characters around the densest cluster of matches, matches marked."""
        best, best_n = spans[0][0], 0
        for start, _, _ in spans[:200]:
            n = len({i for s, _, i in spans if start - width // 3 <= s <= start + 2 * width // 3})
            if n > best_n:
                best, best_n = start, n
        lo = max(0, best - width // 3)
        hi = min(len(text), lo + width)
        if lo > 0:
            lo = text.find(" ", lo, best) + 1 or lo
        if hi < len(text):
            cut = text.rfind(" ", lo, hi)
            hi = cut if cut > best else hi
        out, pos = [], lo
        for s, e, _ in spans:
            if s < pos or e > hi:
                continue
            out.append(text[pos:s])
            out.append(HL_OPEN + text[s:e] + HL_CLOSE)
            pos = e
        out.append(text[pos:hi])
        return ("…" if lo > 0 else "") + " ".join("".join(out).split()) + ("…" if hi < len(text) else "")


# ==================================================================================================
# Search: rank sessions, apply filters, pick the best matching chunks
# ==================================================================================================


class Filters:
    """Session filters shared by the CLI flags and the JSON API."""

    def __init__(self, cwd=None, after=None, before=None, agent=None, tools_only=False, tool=None, path=None):
        self.cwd = os.path.abspath(os.path.expanduser(cwd)).rstrip(os.sep) or os.sep if cwd else None
        self.after = iso(parse_when(after)) if after else None
        self.before = iso(parse_when(before)) if before else None
        if agent and agent not in PARSERS:
            raise UsageError("unknown agent %r (known: %s)" % (agent, ", ".join(PARSERS)))
        self.agent = agent
        self.tool = [t for t in (tool or []) if t]
        self.tools_only = tools_only or bool(self.tool)
        self.path = path

    def sql(self):
        """WHERE conditions on sessions `s`, and their parameters."""
        cond, params = [], []
        if self.agent:
            cond.append("s.agent = ?")
            params.append(self.agent)
        if self.cwd:
            base = self.cwd.rstrip(os.sep)
            cond.append("(s.cwd = ? OR s.cwd LIKE ? ESCAPE '\\')")
            params += [self.cwd, like_escape(base + os.sep) + "%"]
        if self.after:
            cond.append("s.modified >= ?")
            params.append(self.after)
        if self.before:
            cond.append("s.modified < ?")
            params.append(self.before)
        if self.tool:
            cond.append("EXISTS(SELECT 1 FROM touched t WHERE t.session = s.id AND t.tool IN (%s) COLLATE NOCASE)"
                        % ",".join("?" * len(self.tool)))
            params += self.tool
        if self.path:
            cond.append("EXISTS(SELECT 1 FROM touched t WHERE t.session = s.id AND t.path LIKE ? ESCAPE '\\')")
            params.append("%" + like_escape(self.path) + "%")
        return (" AND " + " AND ".join(cond)) if cond else "", params


def like_escape(s):
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _doc_weights():
    return ", ".join(str(DOC_WEIGHTS[c]) for c in DOC_COLUMNS)


def ranked_sessions(con, query, filters):
    """Yield (session row id, bm25, stage, best part's (first_seq, last_seq)) best first: stage 0
    has every word, then all but one, then any. A session scores as its best part (bm25 is negative:
    lower is better)."""
    where, params = filters.sql()
    exclude = ""
    if query.excluded:
        exclude = (" AND d.session NOT IN (SELECT d2.session FROM docs_fts JOIN docs d2 ON d2.id = docs_fts.rowid "
                   "WHERE docs_fts MATCH ?)")
        params = params + [" OR ".join(query.excluded)]
    # bm25() cannot sit inside an aggregate, so parts come back best first and the first part seen
    # of each session stands for it (fts5.md §2.7: grouping in Python is also the fastest way).
    sql = ("SELECT d.session, bm25(docs_fts, %s) AS score, d.first_seq, d.last_seq FROM docs_fts "
           "JOIN docs d ON d.id = docs_fts.rowid JOIN sessions s ON s.id = d.session "
           "WHERE docs_fts MATCH ?%s%s ORDER BY score, d.session") % (_doc_weights(), where, exclude)
    seen = set()
    for stage, expr in enumerate(query.stages()):
        if filters.tools_only:
            expr = "{tools} : (%s)" % expr
        for sid, score, first, last in con.execute(sql, [expr] + params).fetchall():
            if sid not in seen:
                seen.add(sid)
                yield sid, score, stage, (first, last)


def best_matches(con, session, part, matcher, filters, limit=MATCHES_PER_SESSION):
    """The chunks of a session that match best, with snippets: those of its best part, or with a
    tool filter those of the asked-for tool calls anywhere in the session."""
    sql = "SELECT seq, kind, role, tool, ts, text FROM chunks WHERE session=?"
    params = [session["id"]]
    if filters.tools_only:
        sql += " AND kind = 'tool'"
    if filters.tool:
        sql += " AND tool IN (%s) COLLATE NOCASE" % ",".join("?" * len(filters.tool))
        params += filters.tool
    else:
        sql += " AND seq BETWEEN ? AND ?"
        params += list(part)
    scored = []
    for seq, kind, role, tool, ts, text in con.execute(sql + " ORDER BY seq", params):
        text = unpack(text)
        score, spans = matcher.score(text)
        if score:
            scored.append((score * KIND_WEIGHT.get(kind, 0.5), seq, kind, role, tool, ts, text, spans))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return [{"seq": seq, "kind": kind, "role": role, "tool": tool, "timestamp": ts, "score": round(w, 3),
             "snippet": Matcher.snippet(text, spans)}
            for w, seq, kind, role, tool, ts, text, spans in scored[:limit]]


SESSION_COLUMNS = "id, agent, session_id, path, cwd, name, created, modified, parent, chunk_count"


def session_row(con, sid):
    row = con.execute("SELECT %s FROM sessions WHERE id=?" % SESSION_COLUMNS, (sid,)).fetchone()
    return dict(zip([c.strip() for c in SESSION_COLUMNS.split(",")], row)) if row else None


def search(store, query, filters, limit=DEFAULT_LIMIT, offset=0):
    """Rank sessions for a query: [(session dict, score, stage, matches)], and whether more exist."""
    con = store.con
    need = offset + limit + 1
    hits, keys = [], set()
    matcher = Matcher(query)
    try:
        for sid, score, stage, part in ranked_sessions(con, query, filters):
            s = session_row(con, sid)
            key = (s["agent"], s["session_id"])
            if key in keys:
                continue  # one session stored twice (e.g. an agent's database and its older JSON files)
            keys.add(key)
            matches = best_matches(con, s, part, matcher, filters)
            if filters.tools_only and not matches:
                continue  # the words were in some tool call, but not in one of the asked-for tools
            hits.append((s, score, stage, matches))
            if len(hits) >= need:
                break
    except sqlite3.OperationalError as e:
        raise SesameError("search failed: %s" % e, hint="report this query; it should have been made safe")
    return hits[offset:offset + limit], len(hits) > offset + limit


def fallback_snippet(con, s):
    """A session matched on its name only: show the first thing the user said."""
    row = con.execute("SELECT text FROM chunks WHERE session=? AND kind='user' ORDER BY seq LIMIT 1", (s["id"],)).fetchone()
    text = " ".join(unpack(row[0] if row else "").split())
    return text[:200] + ("…" if len(text) > 200 else "")


# ==================================================================================================
# Output: JSON objects, human text, colour policy
# ==================================================================================================


def use_color(stream):
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def mark(snippet, color):
    if color:
        return snippet.replace(HL_OPEN, "\x1b[1;33m").replace(HL_CLOSE, "\x1b[0m")
    return snippet.replace(HL_OPEN, "**").replace(HL_CLOSE, "**")


def result_json(con, s, score, stage, matches):
    parser = PARSERS.get(s["agent"])
    snippet = matches[0]["snippet"] if matches else fallback_snippet(con, s)
    return {
        "sessionId": s["session_id"], "source": s["agent"], "agent": s["agent"], "path": s["path"],
        "cwd": s["cwd"], "name": s["name"], "score": round(-score, 3), "matchedAllTerms": stage == 0,
        "created": s["created"], "modified": s["modified"], "parent": s["parent"],
        "matchedSnippet": mark(snippet, False),
        "matches": [dict(m, snippet=mark(m["snippet"], False)) for m in matches],
        "resumeCommand": parser.resume_command(s) if parser else None,
    }


def short_date(ts):
    return ts[:16].replace("T", " ") + " UTC" if ts else "unknown date"


def print_results(query_text, results, color, out):
    out.write('Found %d session%s matching "%s"\n' % (len(results), "" if len(results) == 1 else "s", query_text))
    for r in results:
        out.write("\n[%.2f] %s (%s) - %s\n" % (r["score"], r["sessionId"][:8], r["name"] or "Unnamed",
                                              short_date(r["modified"])))
        out.write("  %s\n" % (r["cwd"] or "(no working directory)"))
        snippet = r["_snippet"]
        if snippet:
            out.write("  %s\n" % mark(snippet, color))


def emit_json(obj, out=None):
    out = out or sys.stdout
    out.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


# ==================================================================================================
# Commands and CLI
# ==================================================================================================


class Context:
    """What every command needs: the environment's paths, the config and the sources."""

    def __init__(self, env=None):
        self.env = os.environ if env is None else env
        self.index_path = index_path(self.env)
        self.cfg, self.cfg_path = load_config(self.env)
        self.sources = resolve_sources(self.cfg, self.cfg_path, self.env)

    def store(self, create=True):
        return Store.open(self.index_path, create=create)


def _progress_printer(stream):
    """A one-line progress display for terminals: files, MB/s, time left."""
    def show(done, total, done_bytes, total_bytes, elapsed):
        rate = done_bytes / elapsed / 1e6 if elapsed > 0 else 0.0
        left = (total_bytes - done_bytes) / (done_bytes / elapsed) if done_bytes and elapsed > 0 else 0
        stream.write("\rindexing: %d/%d files, %.1f MB/s, %ds left   " % (done, total, rate, left))
        stream.flush()
    return show


def refresh_index(ctx, store, wait_seconds, progress=None, full=False):
    """Run the indexer under the lock; None when another indexer holds it past wait_seconds."""
    lock = IndexLock(os.path.dirname(ctx.index_path))
    if not lock.acquire(wait_seconds):
        return None
    try:
        return run_index(store, ctx.sources, full=full, progress=progress)
    finally:
        lock.release()


def cmd_index(args, ctx):
    store = ctx.store()
    try:
        tty = sys.stderr.isatty() and not args.json
        lock = IndexLock(os.path.dirname(ctx.index_path))
        if not lock.acquire(0):
            _stderr("sesame: another sesame index is running; waiting for it to finish")
            if not lock.acquire(LOCK_WAIT_SECONDS):
                raise IndexError_("another sesame index is still running after %ds" % LOCK_WAIT_SECONDS,
                                  hint="try again when it has finished")
        try:
            summary = run_index(store, ctx.sources, full=args.full, progress=_progress_printer(sys.stderr) if tty else None)
        finally:
            lock.release()
        if tty:
            sys.stderr.write("\r\x1b[K")
        if args.json:
            emit_json(summary.as_json())
        _stderr(summary.line())
        for p in summary.problems[:20] if not args.json else []:
            _stderr("  not indexed: %s: %s" % (p["path"], p["reason"]))
        if len(summary.problems) > 20 and not args.json:
            _stderr("  ... and %d more (sesame index --json lists them all)" % (len(summary.problems) - 20))
    finally:
        store.close()
    return EXIT_OK


LOCK_WAIT_SECONDS = 600


def cmd_search(args, ctx):
    query = Query(" ".join(args.query))
    if args.limit < 1 or args.offset < 0:
        raise UsageError("--limit must be at least 1 and --offset at least 0")
    filters = Filters(cwd=args.cwd, after=args.after, before=args.before, agent=args.agent,
                      tools_only=args.tools, tool=args.tool, path=args.path)
    first_use = not os.path.exists(ctx.index_path)
    store = ctx.store()
    try:
        if not args.no_refresh:
            if first_use:
                _stderr("sesame: building the index for the first time (sesame status shows what it covers)")
            summary = refresh_index(ctx, store, wait_seconds=0)
            if summary is None:
                _stderr("sesame: another sesame index is running; searching the index as it is")
            elif first_use:
                _stderr("sesame: " + summary.line())
        hits, more = search(store, query, filters, limit=args.limit, offset=args.offset)
        results = []
        for s, score, stage, matches in hits:
            r = result_json(store.con, s, score, stage, matches)
            r["_snippet"] = matches[0]["snippet"] if matches else fallback_snippet(store.con, s)
            results.append(r)
    finally:
        store.close()
    if args.json:
        for r in results:
            r.pop("_snippet")
        emit_json({"query": query.text, "resultCount": len(results), "offset": args.offset, "limit": args.limit,
                   "hasMore": more, "nextOffset": args.offset + len(results) if more else None, "results": results})
    else:
        print_results(query.text, results, use_color(sys.stdout), sys.stdout)
        if more:
            sys.stdout.write("\n(more results: --offset %d)\n" % (args.offset + len(results)))
    return EXIT_OK


def index_plan_counts(store, sources):
    """How many session files changed (new, modified or gone) since the last index run."""
    summary = IndexSummary()
    files = discover(sources, summary)
    known = {row[0]: row[1:] for row in store.con.execute("SELECT path, parser, parser_version, size, mtime_ns FROM files")}
    changed = sum(1 for path, parser, st in files
                  if known.get(path) != (parser.id, parser.version, st.st_size, st.st_mtime_ns))
    present = {p for p, _, _ in files}
    return changed + sum(1 for p in known if p not in present)


def cmd_status(args, ctx):
    store = ctx.store(create=False)
    info = {"indexPath": ctx.index_path, "indexExists": store is not None, "configPath": config_path(ctx.env),
            "configFound": ctx.cfg_path is not None, "sqliteVersion": sqlite3.sqlite_version,
            "sesameVersion": __version__, "schemaVersion": SCHEMA_VERSION,
            "sources": [s.as_json() for s in ctx.sources]}
    if store is not None:
        try:
            con = store.con
            per = {a: {"agent": a, "sessions": n, "chunks": c or 0} for a, n, c in con.execute(
                "SELECT agent, count(*), sum(chunk_count) FROM sessions GROUP BY agent ORDER BY agent")}
            info.update({
                "indexBytes": store.size_bytes(),
                "lastIndex": store.meta("last_index"),
                "sessions": sum(p["sessions"] for p in per.values()),
                "chunks": sum(p["chunks"] for p in per.values()),
                "files": con.execute("SELECT count(*) FROM files").fetchone()[0],
                "filesNotIndexed": con.execute("SELECT count(*) FROM files WHERE status != 'ok'").fetchone()[0],
                "perAgent": list(per.values()),
                "changedSinceLastIndex": index_plan_counts(store, ctx.sources),
            })
        finally:
            store.close()
    if args.json:
        emit_json(info)
        return EXIT_OK
    out = sys.stdout
    out.write("index:    %s%s\n" % (ctx.index_path, "" if store else " (not built yet: run sesame index)"))
    if store is not None:
        out.write("size:     %.1f MB, %d sessions, %d chunks from %d files\n"
                  % (info["indexBytes"] / 1e6, info["sessions"], info["chunks"], info["files"]))
        for p in info["perAgent"]:
            out.write("          %-10s %6d sessions %9d chunks\n" % (p["agent"], p["sessions"], p["chunks"]))
        out.write("updated:  %s (%d session files changed since)\n"
                  % (info["lastIndex"] or "never", info["changedSinceLastIndex"]))
    out.write("config:   %s%s\n" % (info["configPath"], "" if ctx.cfg_path else " (none: using discovered sources)"))
    for s in ctx.sources:
        out.write("source:   %-10s %s (%s)\n" % (s.parser.id, s.path, s.origin))
    if not ctx.sources:
        out.write("source:   none found (configure one in %s)\n" % info["configPath"])
    out.write("sqlite:   %s, sesame %s, schema %d\n" % (sqlite3.sqlite_version, __version__, SCHEMA_VERSION))
    return EXIT_OK


def cmd_sources(args, ctx):
    store = ctx.store(create=False)
    counts = {}
    if store is not None:
        try:
            for agent, files, sessions in store.con.execute(
                    "SELECT f.parser, count(DISTINCT f.id), count(s.id) FROM files f LEFT JOIN sessions s "
                    "ON s.file_id = f.id GROUP BY f.parser"):
                counts[agent] = (files, sessions)
        finally:
            store.close()
    configured = {}
    for s in ctx.sources:
        configured.setdefault(s.parser.id, []).append(s)
    rows = []
    for pid, parser in PARSERS.items():
        roots = [s.path for s in configured.get(pid, [])] if ctx.cfg_path and configured else parser.default_roots(ctx.env)
        if pid in configured:
            roots = [s.path for s in configured[pid]]
        files, sessions = counts.get(pid, (0, 0))
        rows.append({"agent": pid, "name": parser.label, "locations": [{"path": r, "exists": os.path.exists(r)} for r in roots],
                     "active": pid in configured, "filesIndexed": files, "sessionsIndexed": sessions})
    if args.json:
        emit_json({"sources": rows})
        return EXIT_OK
    for r in rows:
        where = ", ".join("%s%s" % (l["path"], "" if l["exists"] else " (absent)") for l in r["locations"]) or "(none)"
        sys.stdout.write("%-12s %-6s %5d sessions  %s\n" % (r["agent"], "active" if r["active"] else "-",
                                                           r["sessionsIndexed"], where))
    return EXIT_OK


class _ArgParser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage and exiting."""

    def error(self, message):
        raise UsageError("%s (see: %s --help)" % (message, self.prog))


def _add_json(p):
    p.add_argument("--json", action="store_true", help="print JSON on stdout")


def build_parser():
    p = _ArgParser(prog="sesame", description=__doc__.split("\n\n")[1].replace("\n", " "),
                   epilog="Exit codes: 0 success (also when nothing matched), 1 error, 2 usage error.")
    p.add_argument("--version", action="version", version="sesame " + __version__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgParser)

    s = sub.add_parser("search", help="find sessions by what they were about (refreshes the index first)")
    s.add_argument("query", nargs="+", help='words, "exact phrase", prefix*, -excluded')
    s.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="sessions to show (default %d)" % DEFAULT_LIMIT)
    s.add_argument("--offset", type=int, default=0, help="skip this many results (paging)")
    s.add_argument("--cwd", help="only sessions run in this directory or below")
    s.add_argument("--after", metavar="WHEN", help="only sessions active at or after WHEN (7d, 2w, 3m, 1y, 12h, "
                                                   "today, yesterday, YYYY-MM-DD, ISO)")
    s.add_argument("--before", metavar="WHEN", help="only sessions whose last activity is before WHEN")
    s.add_argument("--agent", help="only sessions of this agent (%s)" % ", ".join(PARSERS))
    s.add_argument("--tools", action="store_true", help="match only inside tool calls and their output")
    s.add_argument("--tool", action="append", metavar="NAME", help="match only inside calls of this tool (repeatable)")
    s.add_argument("--path", metavar="TEXT", help="only sessions whose tool calls touched a path containing TEXT")
    s.add_argument("--no-refresh", action="store_true", help="search the index as it is, without updating it")
    _add_json(s)
    s.set_defaults(func=cmd_search)

    i = sub.add_parser("index", help="bring the index up to date (incremental)")
    i.add_argument("--full", action="store_true", help="rebuild the index from scratch")
    _add_json(i)
    i.set_defaults(func=cmd_index)

    st = sub.add_parser("status", help="what is indexed, from where, and how fresh")
    _add_json(st)
    st.set_defaults(func=cmd_status)

    so = sub.add_parser("sources", help="every supported agent, where it looks, what was found")
    _add_json(so)
    so.set_defaults(func=cmd_sources)
    return p


def error_json(e):
    return {"error": {"code": e.kind, "message": e.message, "hint": e.hint}}


def main(argv=None):
    """Run one sesame command; returns the exit code (tests call this in-process)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    want_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        if not args.command:
            build_parser().print_help()
            return EXIT_USAGE
        return args.func(args, Context())
    except SesameError as e:
        if want_json:
            emit_json(error_json(e))
        _stderr("sesame: %s%s" % (e.message, " (%s)" % e.hint if e.hint else ""))
        return e.code
    except sqlite3.OperationalError as e:
        err = IndexError_("the index is busy or unusable: %s" % e, hint="try again; if it persists run `sesame index --full`")
        if want_json:
            emit_json(error_json(err))
        _stderr("sesame: %s (%s)" % (err.message, err.hint))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _stderr("sesame: interrupted")
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
