#!/bin/sh
''':'
# Start-up. This file is both a POSIX sh script and a Python module. Installed as a command (the
# README copies it onto PATH as `sesame`), the kernel runs it with sh, which reads only these lines:
# they start Python with -I -S (no site-packages and no import paths from the environment: Sesame
# needs neither, and the interpreter starts in a quarter of the time) and the small loader below,
# which runs the rest of this file from a compiled code object cached in $SESAME_CACHE_DIR (default
# $XDG_CACHE_HOME/sesame or ~/.cache/sesame). A cache entry is named after the Python version and
# this file's device, inode, size, modification and change times (a write changes the change time,
# which no program can set back), so an edited or replaced file never runs from an old entry; one
# changed while it was being compiled is not cached. (Its bytes are not even read when the entry
# exists: hashing them cost ~2 ms of every start.) A cache that cannot be read or written is
# skipped (its files are opened without waiting: a FIFO there blocks nothing).
# (Python compiles a script at every start and caches bytecode only for imported modules: for this
# file that is 80 ms per command, most of a search.) The interpreter is remembered there too,
# because `python3` may be a version manager's shim that costs ~90 ms per start; SESAME_PYTHON
# names another one. `python3 sesame.py`, `python3 -m sesame` and
# `import sesame` read these lines as a string and work as usual (without the cache).
c=${SESAME_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sesame}
p=${SESAME_PYTHON:-}
[ -n "$p" ] || { [ -f "$c/python" ] && read -r p < "$c/python" && [ -x "$p" ]; } || p=python3
command -v "$p" >/dev/null 2>&1 || p=python
exec "$p" -I -S -c "
import marshal, os, sys
def _launch(path, cache):
    tag = sys.implementation.cache_tag or 'py%d%d' % sys.version_info[:2]
    with open(path, 'rb') as f:
        st = os.fstat(f.fileno())
        same = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        entry = os.path.join(cache, 'code-%s-%s' % (tag, '-'.join('%x' % v for v in same)))
        try:
            with open(os.open(entry, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0)), 'rb') as g:
                code = marshal.loads(g.read())
        except Exception:
            code = compile(f.read(), path, 'exec')
            st = os.fstat(f.fileno())
            if same == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                _save(cache, entry, marshal.dumps(code))
    if not os.environ.get('SESAME_PYTHON') and os.path.isabs(sys.executable):
        try:
            with open(os.open(os.path.join(cache, 'python'), os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0))) as f:
                known = f.read().strip()
        except (OSError, ValueError):
            known = None
        if known != sys.executable:
            _save(cache, os.path.join(cache, 'python'), (sys.executable + chr(10)).encode())
    return code
def _save(cache, name, data):
    try:
        os.makedirs(cache, mode=0o700, exist_ok=True)
        tmp = '%s.%d.tmp' % (name, os.getpid())
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'wb') as f:
            f.write(data)
        os.replace(tmp, name)
        old = sorted((e.stat().st_mtime, e.path) for e in os.scandir(cache) if e.name.startswith('code-'))
        for _, stale in old[:-8]:
            os.remove(stale)
    except OSError:
        pass
sys.argv = sys.argv[1:]
sys.modules['__main__'].__file__ = sys.argv[0]
exec(_launch(sys.argv[0], sys.argv.pop()))
" "$0" "$@" "$c"
'''

# Everything from here on is Python. (The string above is the module's first statement; the real
# docstring, which is also the --help text, follows.)
__doc__ = """Sesame: find old coding-agent sessions by what they were about.

Sesame indexes the session transcripts that coding agents (pi, Claude Code, Codex, ...) leave on
disk into one SQLite FTS5 index and ranks whole sessions with BM25, so that a few remembered
words ("nix flake simplify", "ECONNREFUSED in CI") find the right session first. It is one file,
needs only the Python standard library (3.9+) and an SQLite with FTS5, makes no network
connection of its own (`sesame sync` runs the user's ssh to the machines they added), and never
writes to the agents' files.

Usage (the list is made from the command table, COMMANDS, at the end of the file):
{usage}

The index lives in $SESAME_DATA_DIR (default ~/.local/share/sesame), the optional config in
$SESAME_CONFIG_DIR/config.jsonc (default ~/.config/sesame). See README.md for everything else.
"""

# Only what most commands use is imported here; the rest is imported where it is needed, so that a
# search does not pay for modules it never touches.
import bisect
import collections
import errno
import io
import itertools
import json
import math
import os
import re
import stat
import sys
import time
import zlib

try:
    # SQLite's C module alone: the sqlite3 package around it adds date adapters Sesame never uses
    # and imports datetime for them (together ~3 ms of every start). Same classes, same connect().
    import _sqlite3 as sqlite3
    sqlite3.connect, sqlite3.DatabaseError, sqlite3.sqlite_version  # noqa: B018 (all Sesame uses)
except (ImportError, AttributeError):
    import sqlite3


class _LazyModule:
    """A module imported where it is first used (the name then holds the module itself)."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        import importlib
        module = globals()[self._name] = importlib.import_module(self._name)
        return getattr(module, attr)


datetime = _LazyModule("datetime")  # dates are parsed when indexing and filtering, not by every search

__version__ = "0.1.0"

# ==================================================================================================
# Constants
# ==================================================================================================

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

# Bump TEXT_VERSION when what is stored for a text changes (redaction rules, identifier parts): the
# next run rebuilds the index from the session files and keeps the sessions whose files are gone.
TEXT_VERSION = 6
# Bump SCHEMA_VERSION when the tables change: an older index is then rebuilt from the session files
# (they are the source of truth), a newer one is refused rather than damaged. From schema 4 on the
# index also keeps sessions whose files are gone: a later migration must carry those over (their
# chunks are in the index; their ranking rows can be rebuilt from them with Store.build_parts).
SCHEMA_VERSION = 5

# Chunk kinds, and the FTS column of the per-session documents each kind is indexed in. The column
# weights are the ranking policy: what the user and the assistant said outranks what tools printed,
# and thinking or injected context can help a tie but never decide what a session is about.
KIND_COLUMN = {
    "user": "talk", "assistant": "talk", "summary": "talk", "custom": "talk",
    "tool": "tools",
    "thinking": "aside", "context": "aside",
}
# `parts` holds the parts of camelCase names found anywhere in the session (see identifier_parts):
# enough to find `handlePaymentIntentWebhook` by "payment intent webhook", never more than the
# name itself would count.
DOC_COLUMNS = ("name", "talk", "tools", "aside", "parts")
# Between two chunks of a column (and two names' parts): a token nobody types. FTS5 sees a column as
# one run of tokens, so without it the last word of a message and the first of the next would be
# "written together" for a phrase query (the first ranking stage).
DOC_BREAK = "\n\n zqbreakqz \n\n"
DOC_WEIGHTS = {"name": 6.0, "talk": 3.0, "tools": 1.0, "aside": 0.3, "parts": 0.8}
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
DEFAULT_MAX_CHARS = 4000  # a default search fits an agent's context cheaply
MATCHES_PER_SESSION = 3
SNIPPET_CHARS = 200
# Snippets mark matched words **like this** (readable as text and as Markdown); a terminal gets colour.
HL_OPEN = HL_CLOSE = "**"

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


class StoreError(SesameError):
    kind = "index"


def _traceback():
    import traceback
    return traceback.format_exc()


# ==================================================================================================
# Utilities
# ==================================================================================================

# What every JSON reader catches: JSON nested deeper than Python's recursion limit ("[" * 100000,
# valid or not) makes the decoder raise RecursionError, not ValueError. The line readers count it as
# one bad line like any other; Sesame's own files (forgotten list, journals' places, a file's
# checkpoint and unrecognised records) read as unusable, as a syntax error does.
BAD_JSON = (ValueError, RecursionError)


class LazyPattern:
    """A regular expression compiled the first time it is used. Compiling all of this file's
    patterns at every start would cost milliseconds that most commands never use."""

    def __init__(self, pattern, flags=0):
        self._source = (pattern, flags)

    def __getattr__(self, name):  # called until the first use has put the methods on the instance
        compiled = re.compile(*self._source)
        for method in ("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split"):
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)


# Session text reaches terminals: an escape sequence inside it (a tool's colour codes, a screen
# clear, an OSC 52 clipboard write planted in a file an agent read) would be obeyed by the terminal
# that prints it. Human output therefore shows every control character except newline and tab in
# caret form (ESC is ^[, as `cat -v` shows it), C1 controls and the bidirectional overrides that
# reorder what is displayed as \x9b or \u202e. JSON escapes them itself (see to_json).
_CONTROL = LazyPattern("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _control_name(m):
    c = ord(m.group())
    return "^" + chr(c ^ 0x40) if c < 0x20 or c == 0x7F else "\\x%02x" % c if c < 0x100 else "\\u%04x" % c


def visible(text):
    """Text safe to print on a terminal: control characters but newline and tab made visible."""
    if not text or not isinstance(text, str) or not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_control_name, text.replace("\r\n", "\n"))


def escape_breaks(text):
    """A field of a one-line layout (a name, a folder, a file name: all can hold a newline) with its
    line breaks and tabs shown as \\n, \\r, \\t; visible() then shows the other controls."""
    if not isinstance(text, str) or not ("\n" in text or "\r" in text or "\t" in text):
        return text
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _stderr(msg):
    try:
        sys.stderr.write(visible(msg) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _plural(n, word):
    """"1 file", "2 files": the word for n of it."""
    return word if n == 1 else word + "s"


def _warn(msg):
    """Something the user should fix that does not stop the command (a config key, a missing folder)."""
    _stderr("sesame: warning: " + msg)


def db_path(path):
    """A file path as the index stores it: text, or the raw bytes of a name that is not valid UTF-8
    (common on disks copied from other systems: Python hands such names over with surrogate escapes,
    which SQLite cannot store as text). Nothing is lost either way; fs_path() turns it back."""
    if path is None or path.isascii():
        return path
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path)


def fs_path(value):
    """A path from the index, as Python opens it."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


def shown_path(path):
    """A path as printed (text and JSON): bytes that are not UTF-8 become \\xNN escapes."""
    path = fs_path(path)
    if path is None or path.isascii():
        return path
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return "".join(c if not 0xD800 <= ord(c) <= 0xDFFF else "\\x%02x" % (ord(c) - 0xDC00)
                       if 0xDC80 <= ord(c) <= 0xDCFF else "\\u%04x" % ord(c) for c in path)


def open_regular(path, text=False):
    """A file opened for reading (binary, or text as UTF-8 with bad bytes replaced), if it is a
    regular file; else OSError. A FIFO, a device or a socket where a session, a sidecar or the
    config should be would make a plain open() wait forever for a writer (or, like /dev/zero, never
    end): it is opened without waiting, and refused."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", path)
        f = open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return io.TextIOWrapper(f, encoding="utf-8", errors="replace") if text else f


def write_private(path, text):
    """Replace a small file of Sesame's own (the sweep's place, the journals', a remote's state...)
    at once: written beside it, then renamed over it, so a reader never sees half of it; readable by
    its owner alone, like the index. An OSError is the caller's (the leftover is removed)."""
    import _thread   # (two threads of one server may replace the same file: each writes its own)
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), _thread.get_ident())
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


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


def expand_path(p, base=None):
    """`~` and $VARS expand in configured paths, as they would in a shell; a relative path is
    relative to `base` (the config file's folder), not to wherever a command happens to run."""
    p = os.path.expanduser(os.path.expandvars(p))
    return os.path.abspath(os.path.join(base, p) if base else p)


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
        with open_regular(path) as f:
            text = f.read().decode("utf-8-sig")  # a byte order mark (Windows editors) is allowed
    except UnicodeDecodeError:
        raise ConfigError("%s: not UTF-8 text" % path)
    except OSError as e:
        raise ConfigError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        try:
            return json.loads(text)  # plain JSON (a generated config) needs no comment stripping
        except json.JSONDecodeError:
            return json.loads(jsonc_to_json(text))
    except json.JSONDecodeError as e:
        raise ConfigError("%s: line %d: invalid JSONC: %s" % (path, e.lineno, e.msg))
    except RecursionError:
        raise ConfigError("%s: invalid JSONC: nested too deeply" % path)


class Source:
    """One place to look for sessions: a parser and a root folder or file."""

    def __init__(self, parser, path, origin):
        self.parser, self.path, self.origin = parser, path, origin

    def as_json(self):
        return {"parser": self.parser.id, "path": self.path, "origin": self.origin,
                "exists": os.path.exists(self.path)}


# Every key the config may hold (and the keys of one "sources" entry). Others are reported, with the
# nearest known key: a misspelt "source" would otherwise silently index the default places.
CONFIG_KEYS = ("sources", "discover", "piSessionPaths", "exclude", "redact", "keepDeletedSessions", "remoteSyncSeconds")
SOURCE_KEYS = ("parser", "path")


def load_config(env=None):
    """The config file as a dict ({} when there is none), validated enough to trust its shape."""
    path = config_path(env)
    if not os.path.exists(path):
        return {}, None
    cfg = load_jsonc(path)
    if not isinstance(cfg, dict):
        raise ConfigError("%s: the config must be a JSON object" % path)
    return cfg, path


def _unknown_keys(obj, known, where, warn):
    for key in obj:
        if key not in known:
            import difflib
            close = difflib.get_close_matches(key, known, 1, 0.6)
            warn("%s: unknown key %r, ignored%s" % (where, key, "; did you mean %r?" % close[0] if close else ""))


def resolve_sources(cfg, cfg_path, env=None, warn=None):
    """The sources to index: from the config when it names any, else every agent's default place;
    with `"discover": true`, the config's and then every agent's default place (a folder of projects
    named for Aider's histories beside the agents found on their own).

    Relative paths are relative to the config file's folder. `warn` is told about what the config
    gets wrong but can be gone on from: unknown keys, and configured folders that do not exist
    (an unplugged drive must not stop the other sources, `status` or the MCP server)."""
    env = os.environ if env is None else env
    warn = warn or (lambda message: None)
    _unknown_keys(cfg, CONFIG_KEYS, cfg_path, warn)
    entries = []
    if "sources" in cfg:
        if not isinstance(cfg["sources"], list):
            raise ConfigError('%s: "sources" must be a list of {"parser", "path"} objects' % cfg_path)
        for i, s in enumerate(cfg["sources"]):
            if not isinstance(s, dict) or not isinstance(s.get("path"), str) or not isinstance(s.get("parser"), str):
                raise ConfigError('%s: sources[%d] needs a "parser" and a "path" (strings)' % (cfg_path, i))
            _unknown_keys(s, SOURCE_KEYS, "%s: sources[%d]" % (cfg_path, i), warn)
            entries.append(("sources[%d]" % i, s["parser"], s["path"]))
    if "piSessionPaths" in cfg:  # the older form, pi only
        paths = cfg["piSessionPaths"]
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ConfigError('%s: "piSessionPaths" must be a list of strings' % cfg_path)
        entries += [("piSessionPaths[%d]" % i, "pi", p) for i, p in enumerate(paths)]
    sources = []
    if entries:
        for where, parser_id, raw in entries:
            parser = PARSERS.get(parser_id)
            if parser is None:
                raise ConfigError("%s: unknown parser %r (known: %s)" % (cfg_path, parser_id, ", ".join(PARSERS)))
            if not raw.strip():
                raise ConfigError('%s: %s: the path is empty' % (cfg_path, where))
            path = expand_path(raw, os.path.dirname(cfg_path))
            if not os.path.exists(path):
                warn("%s: %s: %s does not exist (an unplugged drive?); indexing the other sources" % (cfg_path, where, path))
                continue
            sources.append(Source(parser, path, "config"))
    discover = cfg.get("discover", False)
    if not isinstance(discover, bool):
        raise ConfigError('%s: "discover" must be true or false' % cfg_path)
    if entries and not discover:
        return sources
    named = {(src.parser.id, src.path) for src in sources}
    for parser in PARSERS.values():
        for root in parser.default_roots(env):
            if os.path.exists(root) and (parser.id, root) not in named:
                sources.append(Source(parser, root, "discovered"))
    return sources


# ==================================================================================================
# Time
# ==================================================================================================

_ISO_RE = LazyPattern(
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
    try:  # a zone offset out of range, or a date at the edge of datetime's range, is no date at all
        if tz is None:
            return dt.astimezone(datetime.timezone.utc)  # naive = local time
        if tz in ("Z", "z"):
            return dt.replace(tzinfo=datetime.timezone.utc)
        sign = 1 if tz[0] == "+" else -1
        tz = tz[1:].replace(":", "")
        off = datetime.timedelta(hours=int(tz[:2]), minutes=int(tz[2:]))
        return dt.replace(tzinfo=datetime.timezone(sign * off)).astimezone(datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


def iso(dt):
    """The one stored and printed form: ISO 8601 UTC with milliseconds and Z (sorts as text)."""
    if dt is None:
        return None
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (dt.microsecond // 1000)


_CANONICAL_TS = LazyPattern(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")


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

    def extend(self, text):
        """self.text += text, for a streamed fragment of the same message (Droid deltas, Kimi parts).
        The text is taken out first: with one reference left, CPython extends the string in place
        instead of copying it. Fragments arrive by the thousand; `+=` on the attribute copied all the
        text before each one (80,000 took 4 s, a million would take an hour; 0.03 s so)."""
        value, self.text = self.text, None
        value += text
        self.text = value


class Session:
    """A conversation as parsers hand it to the indexer."""

    def __init__(self, agent, session_id, path):
        self.agent, self.session_id, self.path = agent, session_id, path
        self.cwd = self.name = self.created = self.modified = self.parent = None
        self.chunks = []
        self.summary = None      # a summary the agent keeps beside the session (pi's sessions-meta)
        self.labels = []         # more words naming the session (description, tags): weighted like the name
        self.checkpoint = None   # resumable parsers: where to go on ({"offset", "seq", "state"})
        self.complete = True     # False when a resumable parse stopped at its byte limit

    def add(self, kind, text, **kw):
        """Append a chunk of one of the kinds of KIND_COLUMN (another is a parser's bug: raised, so
        that a typo never files text silently in the wrong column)."""
        if kind not in KIND_COLUMN:
            raise ValueError("unknown chunk kind %r" % (kind,))
        if text and not isinstance(text, str):   # what a parser did not expect there, kept as JSON
            text = json.dumps(text, ensure_ascii=False, default=str)
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
    """What a parser noticed while reading one file: skipped lines and why, and the records it did
    not recognise (the first sign that a new release of the agent writes something Sesame does not
    read yet; `sesame status` reports them per agent)."""

    def __init__(self):
        self.skipped = {}
        self.unknown = {}          # record or content block type -> count
        self.versions = set()      # the agent versions the file's records name

    def skip(self, reason, n=1):
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def unrecognized(self, record_type, n=1):
        """Count a record (or content block) of a type this parser neither reads nor skips on purpose.
        Parsers call it through Parser.record_type and block_type, which know their declarations."""
        key = str(record_type)[:80]
        self.unknown[key] = self.unknown.get(key, 0) + n

    def saw_version(self, version):
        """Note the agent version a record names (e.g. Claude Code's `version`, Codex's `cli_version`)."""
        if isinstance(version, str) and version and len(self.versions) < 20:
            self.versions.add(version[:40])

    @property
    def skipped_lines(self):
        return sum(self.skipped.values())


class NotASessionFile(Exception):
    """Raised by a parser for a file that is not its format (reported, never fatal)."""


class ReadAgain(Exception):
    """Raised by a resumable parser when the lines appended since its checkpoint change what it gave
    before (a rewind, a record of an earlier message written again) or cannot be joined to it (they
    start a second session in the file): parse_file then reads the file whole, from its start."""


def cap_text(text, cap, head_share=0.75):
    """Keep the head and the tail of a long text and say how much of the middle was dropped."""
    if len(text) <= cap:
        return text
    head = int(cap * head_share)
    tail = cap - head
    return "%s%s%s" % (text[:head], CAP_NOTE % (len(text) - cap), text[-tail:])


CAP_NOTE = "\n[... %d characters dropped ...]\n"
CAPPED_CHUNK = CHUNK_CAP + len(CAP_NOTE % sys.maxsize)   # the longest a chunk capped at CHUNK_CAP can be


# Sesame's own output, met in the sessions that called it (its MCP tools, or the command through a
# shell tool, as the skill does): search results and shown sessions are copies of other sessions,
# each indexed where it was said. Indexed again they would put the session that looked something up
# beside, or above, the session it found, and keep the words of a forgotten session findable. The
# call stays (what was asked for); its output is left out, with its length. Tool names as agents
# prefix a server's: mcp__sesame__show (Claude Code; Codex 0.169's namespace mcp__sesame + show, recorded),
# mcp_sesame_search (Gemini CLI 0.61, recorded), sesame_show (OpenCode)...
_OWN_TOOL = LazyPattern(r"(?:mcp[_-]{1,2})?sesame(?:__|[_.:/-])(?:search|show|status|export)", re.I)
# ...and a command that is one run of it (piped on or not): `sesame search ... | head`,
# `python3 ~/bin/sesame.py show ...`; not one that runs something else after it.
_OWN_COMMAND = LazyPattern(r"\s*(?:python3?\s+)?(?:\S*/)?sesame(?:\.py)?\s+(?:search|show|status|export)\b[^;&\n`$]*")
OWN_OUTPUT_NOTE = "(Sesame's own output, %d characters: not indexed again)"


# A file read back with its line numbers (Claude Code's "     1→import os", cat -n's "     1\t",
# OpenCode's "00001| " and "1: "): each number is a token, so reading a long file put every number
# from 1 up into the index (a search for "1234" found a 2,000-line file read). Where numbers run
# 1, 2, 3... down the lines, they are left out; the lines stay.
_LINE_NUMBER = LazyPattern(r"^ *(\d+)(?:→|\t|\| |: )", re.M)


def line_numbers_dropped(text):
    """text without the line numbers of a numbered listing (see above); as it is otherwise."""
    if not _LINE_NUMBER.search(text, 0, 400):
        return text
    numbers = [int(m.group(1)) for m in _LINE_NUMBER.finditer(text)]
    steps = sum(b == a + 1 for a, b in zip(numbers, numbers[1:]))
    if len(numbers) < 3 or steps < 0.9 * (len(numbers) - 1):
        return text
    return _LINE_NUMBER.sub("", text)


# Tool definitions loaded on request (Qwen Code 0.15 offers MCP tools behind its tool_search, which
# answers with their schemas, recorded): the same descriptions in every session that loaded them,
# such as Sesame's own "Find past coding-agent sessions (pi, Claude Code, Codex...)", matched every
# such session. The names loaded stay. (Codex's tool_search_output records are skipped; Claude
# Code's ToolSearch answers with tool references, no text.)
_TOOL_DEFINITIONS = LazyPattern(r"\s*<functions>\s*(?:<function>.*?</function>\s*)+</functions>\s*", re.S)
_DEFINED_NAME = LazyPattern(r'<function>\s*\{\s*"name"\s*:\s*"([^"]{1,200})"')


def tool_definitions(output):
    """The names of the tools a <functions> listing defines, for that listing; else the output as it is."""
    if not output[:64].lstrip().startswith("<functions>") or not _TOOL_DEFINITIONS.fullmatch(output):
        return output
    return "(tool definitions: %s)" % ", ".join(_DEFINED_NAME.findall(output))


def own_output(name, args):
    """Whether a tool call's output is Sesame's own (see _OWN_TOOL)."""
    if isinstance(name, str) and _OWN_TOOL.fullmatch(name):
        return True
    if not isinstance(args, dict):
        return False
    command = args.get("command", args.get("cmd"))   # (Codex 0.169's exec_command: "cmd")
    command = _command_string(command) if isinstance(command, list) else command   # ["bash", "-lc", "..."]
    return isinstance(command, str) and _OWN_COMMAND.fullmatch(command) is not None


def tool_text(name, args=None, output=None, is_error=False):
    """The structured text of a tool call: its name, its arguments (the file it touched first, so that
    a one-line view names the file, not the first line of what a `write` put in it: OpenCode and
    Kilo give `content` before `filePath`), then what it printed (not Sesame's own: own_output; of
    tool definitions, their names: tool_definitions)."""
    lines = ["tool: %s" % name]
    if isinstance(args, dict):
        for k, v in sorted(args.items(), key=lambda kv: kv[0] not in PATH_ARG_KEYS):
            if v is None or v == "":
                continue
            if not isinstance(v, str):
                v = json.dumps(v, ensure_ascii=False)
            lines.append("%s: %s" % (k, cap_text(v, FIELD_CAP)))
    elif isinstance(args, str) and args:
        lines.append("input: %s" % cap_text(args, FIELD_CAP))
    if output:
        if not isinstance(output, str):   # a structured result (an object, a number) is kept as JSON
            output = json.dumps(output, ensure_ascii=False, default=str)
        lines.append("error:" if is_error else "output:")
        if not is_error and own_output(name, args):
            output = OWN_OUTPUT_NOTE % len(output)
        lines.append(cap_text(line_numbers_dropped(tool_definitions(output)), TOOL_OUTPUT_CAP))
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


def text_of(content):
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
# Privacy: secrets redacted before indexing; what the user keeps out (exclude, forget)
# ==================================================================================================

# Secrets are replaced by [REDACTED:<kind>] before text reaches the index (session text, names,
# summaries, labels and working directories), so the words around them stay searchable. The rules
# follow gitleaks (github.com/gitleaks/gitleaks, config/gitleaks.toml; rule ids in the comments)
# for the secrets a coding session shows most, and stay cheap on ordinary text: each group of token
# shapes runs only when its hint (a literal every match contains) is in the text; `name = value`
# pairs whose name says secret are looked at only where such a name occurs.
_PEM_BEGIN = r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_SHAPE_GROUPS = [  # (hints, [(kind, regex)])
    (("PRIVATE KEY",), [
        # private-key: a whole block; one cut by the end of the text (or the output cap) up to the
        # end; and the tail of one whose start was cut (from the start or the cap's marker).
        ("private_key", r"%s[\s\S]{0,16384}?(?:%s|\Z)" % (_PEM_BEGIN, _PEM_END)),
        ("private_key", r"(?:\A|(?<=characters dropped \.\.\.\]\n))(?:(?!-----BEGIN|\[\.\.\. \d+ characters dropped)[\s\S])"
                        r"{0,16384}?%s" % _PEM_END),
    ]),
    (("sk-",), [
        ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),                                    # anthropic-api-key
        ("openai_key", r"\bsk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}|\bsk-[A-Za-z0-9]{32,}"),  # openai-api-key
    ]),
    (("k_live_", "k_test_", "k_prod_"), [
        ("stripe_key", r"\b[rs]k_(?:live|test|prod)_[A-Za-z0-9]{10,99}"),                   # stripe-access-token
    ]),
    (("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"), [
        ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,}|\bgh[pousr]_[A-Za-z0-9]{36,}"),  # github-pat, -fine-grained-pat, -oauth, -app-token
    ]),
    (("AKIA", "ASIA"), [
        ("aws_access_key_id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),                            # aws-access-token
    ]),
    (("xox",), [
        ("slack_token", r"\bxox[abprse]-[A-Za-z0-9-]{10,}"),                                # slack-*-token
    ]),
    (("AIza",), [
        ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),                                      # gcp-api-key
    ]),
    (("eyJ",), [
        ("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}=*"),    # jwt
    ]),
    (("hf_",), [
        ("huggingface_token", r"\bhf_[A-Za-z0-9]{34,}"),                                     # huggingface-access-token
    ]),
    (("gsk_",), [
        # groq-api-key says 48 characters; the keys Groq issues (and those seen in real sessions) have 52.
        ("groq_key", r"\bgsk_[A-Za-z0-9]{48,}"),                                             # groq-api-key
    ]),
    ((":AA",), [
        # telegram-bot-api-token wants the word "telegram" before it; a bot token also comes bare
        # (in https://api.telegram.org/bot<token>/, or pasted alone), and its shape (the bot's id,
        # ":AA", 33 characters) is telling enough alone.
        ("telegram_token", r"(?<![0-9])[0-9]{8,10}:AA[0-9A-Za-z_-]{33}(?![0-9A-Za-z_-])"),  # telegram-bot-api-token
    ]),
    (("npm_",), [
        ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),                                           # npm-access-token
    ]),
    (("SG.",), [
        ("sendgrid_key", r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"),               # sendgrid-api-token
    ]),
    (("SK",), [
        ("twilio_key", r"\bSK[0-9a-fA-F]{32}\b"),                                           # twilio-api-key
    ]),
    (("earer ",), [
        ("bearer_token", r"(?<=[Bb]earer )[A-Za-z0-9._~+/=-]{16,}"),                        # (curl-auth-header)
    ]),
    (("asic ",), [
        # Authorization: Basic <base64 of user:password> (curl-auth-header); not "Basic usage".
        ("basic_auth", r"(?<=[Bb]asic )(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{12,}={0,2}"),
    ]),
    (("ookie:",), [
        ("cookie", r"(?<=[Cc]ookie: )[^\s\"'][^\n\"']{3,}"),   # (curl-auth-cookie)
    ]),
]
# Secrets after words that stay: (hints, pattern whose group 1 stays and group 2 is the secret, kind).
_PREFIXED = [
    (("://",), LazyPattern(r"(://[^\s:/@'\"]{1,64}:)([^\s/@'\"]{1,128})(?=@)"), "url_password"),  # postgres://u:pw@host
    (("mysql",), LazyPattern(r"(\bmysql(?:dump|admin|sh)?\b[^\n]{0,200}?\s-p)([^\s'\"-][^\s'\"]{2,})"), "secret"),  # mysql -pPW
]


def _spliced(text, spans, kind):
    """(text with each of the (start, end) spans, in order, replaced by [REDACTED:kind], how many):
    what re.subn gives, for the shapes found in one pass below."""
    out, last = [], 0
    for a, b in spans:
        out += [text[last:a], "[REDACTED:%s]" % kind]
        last = b
    return "".join(out) + text[last:], len(spans)


class _PrivateKeyBlocks:
    """The private-key shapes of _SHAPE_GROUPS (its first group), found as its expression finds
    them but in one pass: tried at each "-----BEGIN ... PRIVATE KEY-----", the expression looked up
    to 16 KB ahead for the end, so a text of many headers without one (a key listing cut short, a
    page about key formats) took N x 16 KB: 0.5 s for 64 KB. Here every place where a header, an
    end or a stop of the cut tail's form starts is found once, and each candidate is decided by
    lookups (bisect). Same spans, in the same order (a test holds the two equal)."""

    _BEGIN = LazyPattern(_PEM_BEGIN)
    _END = LazyPattern(_PEM_END)
    _STARTS = {name: LazyPattern("(?=%s)" % rx) for name, rx in (   # zero-width: overlapping ones too
        ("begin", _PEM_BEGIN), ("end", _PEM_END),
        ("stop", r"-----BEGIN|\[\.\.\. \d+ characters dropped"))}
    _AFTER_CUT = "characters dropped ...]\n"
    _MAX = 16384

    def subn(self, repl, text):
        ends, stops = [m.start() for m in self._STARTS["end"].finditer(text)], None
        heads = {m.start() for m in self._STARTS["begin"].finditer(text)}
        tails, at = {0}, text.find(self._AFTER_CUT)
        while at >= 0:
            tails.add(at + len(self._AFTER_CUT))
            at = text.find(self._AFTER_CUT, at + 1)
        spans, pos = [], 0
        for p in sorted(heads | tails):
            if p < pos:
                continue
            end = None
            if p in heads:   # a whole block: its header, then the first end within 16 KB, or the text's end
                body = self._BEGIN.match(text, p).end()
                k = bisect.bisect_left(ends, body)
                if k < len(ends) and ends[k] - body <= self._MAX:
                    end = self._END.match(text, ends[k]).end()
                elif len(text) - body <= self._MAX:
                    end = len(text)
            if end is None and p in tails:   # the tail of a block whose start was cut: up to its end
                k = bisect.bisect_left(ends, p)
                if k < len(ends) and ends[k] - p <= self._MAX:
                    if stops is None:
                        stops = [m.start() for m in self._STARTS["stop"].finditer(text)]
                    j = bisect.bisect_left(stops, p)
                    if j == len(stops) or stops[j] >= ends[k]:
                        end = self._END.match(text, ends[k]).end()
            if end is not None:
                spans.append((p, end))
                pos = end
        return _spliced(text, spans, "private_key")


class _JsonWebTokens:
    """The jwt shape of _SHAPE_GROUPS, found as its expression finds it but in one pass: each of
    its three parts is a whole run of [A-Za-z0-9_-] (what follows a shorter one is not the "." it
    needs), but the expression, tried at every "eyJ" of one long run ("eyJ-eyJ-..."), went to the
    run's end and back from each: 1.6 s for 64 KB. Here a start that fails skips the rest of its
    run, where every start ends the same way. (A test holds it equal to the expression.)"""

    _START = LazyPattern(r"\beyJ")
    _RUN = LazyPattern(r"[A-Za-z0-9_-]*")
    _PADDING = LazyPattern(r"=*")

    def subn(self, repl, text):
        spans, pos = [], 0
        while True:
            m = self._START.search(text, pos)
            if not m:
                break
            end = first = self._RUN.match(text, m.end()).end()
            if first - m.end() >= 10 and text.startswith(".eyJ", first):
                end = self._RUN.match(text, first + 4).end()
                if end - first - 4 >= 10 and text.startswith(".", end):
                    last = self._RUN.match(text, end + 1).end()
                    if last - end - 1 >= 10:
                        end = self._PADDING.match(text, last).end()
                        spans.append((m.start(), end))
            pos = max(end, m.end())
        return _spliced(text, spans, "jwt")


_SHAPES = [(hints, _PrivateKeyBlocks() if hints == ("PRIVATE KEY",) else _JsonWebTokens() if hints == ("eyJ",) else
            LazyPattern("|".join("(?P<%s_%d>%s)" % (kind, i, rx) for i, (kind, rx) in enumerate(group))))
           for hints, group in _SHAPE_GROUPS]
_SECRET_WORD = LazyPattern(r"secret|token|passw(?:or)?d|passwd|api[_-]?key|private[_-]?key|access[_-]?key|"
                          r"auth[_-]?key|(?<=_)(?:pass|pwd|pw)(?![a-z])")  # searched in the lower-cased text
# Where a match of _SECRET_WORD can start, from where each of these literals is found in it: the
# pattern, an alternation without a literal start, scans at ~30 MB/s; str.find runs at memory speed.
_SECRET_STARTS = {"secret": (0,), "token": (0,), "pass": (0,), "_pw": (1,),
                  "key": (3, 4, 4, 5, 6, 7, 7, 8)}  # api_key, auth-key, access_key, private_key (with or without _ -)
_SECRET_HINTS = tuple(_SECRET_STARTS)
_KEY_AFTER = ("i", "e", "s", "h")   # the letter "key" follows (past one _ or -) in api, private, access, auth


def lower_in_place(text, dotted_i="i"):
    """text in lower case, each character in its place: İ, the one letter whose lower case is two
    characters (i and a dot above: every offset after it would move), becomes `dotted_i`: i, as
    unicode61 folds it (the matcher), or ı, which no secret word, hint or [a-z] holds, as İ (redact).
    (Lowered character by character instead, a session of 8 MB with one İ took 1.4 s.)"""
    low = text.lower()
    return low if len(low) == len(text) else text.replace("\u0130", dotted_i).lower()


def _secret_words(low):
    """The matches of _SECRET_WORD in low, as finditer would give them (leftmost, not overlapping),
    looked for only where a hint occurs."""
    starts = set()
    for hint, offsets in _SECRET_STARTS.items():
        at = low.find(hint)
        while at >= 0:
            if hint != "key":
                starts.update(at + k for k in offsets)
            elif low[at - 2 if low[at - 1:at] in ("_", "-") else at - 1:at][:1] in _KEY_AFTER:
                starts.update(at - k for k in offsets)   # (not "monkey", "the key": a tool output of them took 0.6 s a MB)
            at = low.find(hint, at + 1)
    end = 0
    for at in sorted(starts):
        if at >= end:
            m = _SECRET_WORD.match(low, at)
            if m:
                end = m.end()
                yield m


# After the secret word: the rest of the name (_NAME_REST), an optional closing quote, `=` or `:`,
# then the value (_SECRET_VALUE). The rest of the name is matched apart, once for all the secret
# words of one run of name characters: they all end where it ends, so they have the same value.
# (As one pattern, each secret word of a long run, 64 KB of "tokentoken..." or "_pw_pw...", went
# to the run's end and back: a chunk took 20-40 s.)
_NAME_REST = LazyPattern(r"[A-Za-z0-9_.-]*")
_SECRET_VALUE = LazyPattern(r"[\"']?[ \t]*[:=][ \t]*(\"[^\"\n]{6,}\"|'[^'\n]{6,}'|(?![\"'])[^\s,;\"'`)}\]]{6,})")
# A command-line flag: --password VALUE, --token=VALUE (the word follows "--"); the same way.
_FLAG_REST = LazyPattern(r"[A-Za-z0-9_-]*")
_FLAG_VALUE = LazyPattern(r"(?:=|[ \t]+)(\"[^\"\n]{4,}\"|'[^'\n]{4,}'|(?![\"'-])[^\s\"'`]{4,})")
# Values that are obviously not secrets: placeholders, references to other variables, booleans.
_NOT_SECRET = LazyPattern(r"^[\"']?(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]*>|\*+|x+|X+|\.\.\.+|null|None|"
                         r"true|false|undefined|changeme|\[REDACTED[^\]]*\]|process\.env\.[A-Za-z0-9_.]+|"
                         r"os\.environ.*|getenv\(.*|[A-Za-z_][A-Za-z0-9_.]*[(\[].*)[\"']?$")  # the last: code


# How secret_hints looks for each shape's hints. Python's expression engine skips ahead to a
# pattern's first letter, faster than str.find when that letter is rare (capitals, "x", "g", ":"),
# and finds several hints with that start in one scan ("gh" for GitHub's six kinds of token).
# Where the first letter is among the commonest of prose and code, str.find is faster.
_COMMON_FIRST = frozenset("aeinost")
_SHAPE_SCANS = [[h for h in hints if h[0] in _COMMON_FIRST]
                + ([LazyPattern("|".join(re.escape(h) for h in hints if h[0] not in _COMMON_FIRST))]
                   if any(h[0] not in _COMMON_FIRST for h in hints) else [])
                for hints, _ in _SHAPE_GROUPS]


def secret_hints(texts):
    """(shapes, held) for redacting many texts at once (a session's chunks): the secret shapes whose
    hints occur in any of them (redact's `shapes`), and the indices of the texts that hold a hint of
    any step of redact (a shape, a prefixed secret, a secret word). Each step of redact needs its
    hint in the text, so a text that holds none comes out unchanged: only those held are redacted.

    One look per hint over the texts joined, instead of one per text: a session's ~100 chunks,
    32 hints each, were a quarter of the time a Codex rollout takes to parse. A hint holds no line
    break, so each occurrence lies inside one text; after one is found, the look goes on from the
    end of that text."""
    texts = list(texts)
    joined = "\n".join(texts)
    ends = list(itertools.accumulate(len(t) + 1 for t in texts))   # (a text's end: its line break)
    held = set()

    def scan(hint, text):
        """Whether `hint` (a string, or an expression of hints) occurs in text; marks the texts."""
        at, found = 0, False
        while True:
            if isinstance(hint, str):
                at = text.find(hint, at)
            else:
                m = hint.search(text, at)
                at = m.start() if m else -1
            if at < 0:
                return found
            found = True
            k = bisect.bisect_right(ends, at)
            held.add(k)
            at = ends[k]
    # (sum, not any: every scan of a shape runs, each marking the texts its hints are in)
    shapes = [shape for shape, scans in zip(_SHAPES, _SHAPE_SCANS) if sum(scan(h, joined) for h in scans)]
    for hints, _, _ in _PREFIXED:
        for h in hints:
            scan(h, joined)
    low = lower_in_place(joined, "\u0131")
    for h in _SECRET_HINTS:
        scan(h, low)
    return shapes, held


def _secret_span(v):
    """(start, end) of the value a _SECRET_VALUE or _FLAG_VALUE match found, without its quotes;
    None when there is none or it is obviously not a secret (a placeholder, a variable, code)."""
    if not v:
        return None
    value = v.group(1)
    if _NOT_SECRET.match(value) or not any(c.isalnum() for c in value):
        return None
    quote = 1 if value[0] in "\"'" else 0
    return v.start(1) + quote, v.end(1) - quote


def redact(text, shapes=None):
    """(text with secrets replaced by [REDACTED:<kind>], number of replacements). `shapes`: the
    secret shapes to look for (secret_hints), when the caller knows which can occur; else all."""
    if not text:
        return text, 0
    count = 0
    for hints, pattern in _SHAPES if shapes is None else shapes:
        for h in hints:
            if h in text:
                text, n = pattern.subn(lambda m: "[REDACTED:%s]" % m.lastgroup.rpartition("_")[0], text)
                count += n
                break
    for hints, pattern, kind in _PREFIXED:
        if any(h in text for h in hints):
            text, n = pattern.subn(lambda m: m.group(1) + "[REDACTED:%s]" % kind, text)
            count += n
    spans = []
    low = lower_in_place(text, "\u0131")
    name_end = flag_end = -1   # where the run of name characters of the last secret word ends (_NAME_REST)
    for m in _secret_words(low):
        if spans and m.start() < spans[-1][1]:
            continue
        if m.end() > name_end:   # (the words come in order: one at or before name_end is in that run)
            name_end = _NAME_REST.match(text, m.end()).end()
            name_value = _SECRET_VALUE.match(text, name_end)
            name_span = _secret_span(name_value)
        span = name_span
        if name_value is None and low.endswith("--", 0, m.start()):   # (a flag only where no = or : follows)
            if m.end() > flag_end:
                flag_end = _FLAG_REST.match(text, m.end()).end()
                flag_span = _secret_span(_FLAG_VALUE.match(text, flag_end))
            span = flag_span
        if span is not None:
            spans.append(span)
    if spans:
        out, pos = [], 0
        for start, end in spans:
            out.append(text[pos:start])
            out.append("[REDACTED:secret]")
            pos = end
        out.append(text[pos:])
        text, count = "".join(out), count + len(spans)
    return text, count


def redact_values(value):
    """Every string inside a JSON-like value redacted (the structure stays as it was). A parser's
    checkpoint state is such a value, written at every read: mostly ids and hashes (Claude Code's
    holds a session's message ids), where no secret can be. Each step of redact needs its hint in the
    string, so one look for the hints over all the strings first: without any, nothing is changed
    (5.7 of 10.4 s of a re-read of 1 GB of Claude Code files went to redacting ids one by one)."""
    strings = []

    def collect(v):
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                collect(x)
        elif isinstance(v, list):
            for x in v:
                collect(x)
    collect(value)
    shapes, held = secret_hints(strings)
    if not held:
        return value

    def each(v):
        if isinstance(v, str):
            return redact(v, shapes)[0]
        if isinstance(v, dict):
            return {k: each(x) for k, x in v.items()}
        if isinstance(v, list):
            return [each(x) for x in v]
        return v
    return each(value)


class PathPatterns:
    """Config `exclude` patterns, compiled once. A pattern with *, ? or [ is a glob on the whole path;
    otherwise it is a folder (or file) and everything below it.

    Every file listed and every session's cwd is checked, so a check must not cost one glob test
    per pattern (a generated list of 200,000 folders made every search slow): folders are a set,
    looked up for the path and each folder above it; a glob that starts with a literal folder is
    tried only on paths below that folder; a glob that starts with a wildcard only on paths that
    hold its longest literal part (`/scratch/` of `*/scratch/*`).
    """

    def __init__(self, patterns):
        self.folders, self.anchored, self.floating = set(), {}, {}
        wildcard = re.compile(r"[*?[]").search
        for p in patterns:
            m = wildcard(p)
            if m is None:
                self.folders.add(p.rstrip(os.sep) or os.sep)
                continue
            wild = m.start()
            if os.path.isabs(p) and os.sep in p[:wild]:
                self.anchored.setdefault(os.path.dirname(p[:wild]), []).append(p)
            else:
                literal = max(re.split(r"[*?]|\[[^\]]*\]?", p), key=len)
                self.floating.setdefault(literal, []).append(p)

    def __bool__(self):
        return bool(self.folders or self.anchored or self.floating)

    def match(self, path):
        import fnmatch
        for literal, globs in self.floating.items():
            if literal in path and any(fnmatch.fnmatchcase(path, p) for p in globs):
                return True
        d = path
        while True:
            if d in self.folders:
                return True
            if d in self.anchored and any(fnmatch.fnmatchcase(path, p) for p in self.anchored[d]):
                return True
            parent = os.path.dirname(d)
            if parent == d:
                return False
            d = parent


class Policy:
    """What the user keeps out of the index or hidden in it: config `exclude` (session files, or
    whole projects by cwd), config `redact` (on by default), and sessions `sesame forget` named."""

    def __init__(self, exclude=(), redact=True, forgotten=(), keep_deleted=True):
        self.exclude = list(exclude)
        joined = "\n".join(self.exclude)  # one look at a long generated list instead of one per pattern
        if "~" in joined or "$" in joined:
            self.exclude = [os.path.expanduser(os.path.expandvars(p)) for p in self.exclude]
        self._patterns = None  # compiled at the first check: a search that refreshes nothing never needs them
        self._fingerprint = None
        self.redact = redact
        self.forgotten = {(f.get("agent"), f.get("sessionId")) for f in forgotten}
        self.keep_deleted = keep_deleted  # config `keepDeletedSessions`: sessions whose files are gone stay

    def fingerprint(self):
        """Changing these settings, or how text is redacted and analysed (TEXT_VERSION), changes what
        the whole index should hold: it is rebuilt (the sessions kept from deleted files included:
        their text is redacted again, see Store.clear_index)."""
        if self._fingerprint is None:
            self._fingerprint = json.dumps({"exclude": self.exclude, "redact": self.redact, "text": TEXT_VERSION},
                                           sort_keys=True)
        return self._fingerprint

    def excludes_path(self, path):
        if self._patterns is None:
            self._patterns = PathPatterns(self.exclude)
        return self._patterns.match(path)

    def keeps(self, agent, session_id, cwd):
        return (agent, session_id) not in self.forgotten and not (cwd and self.excludes_path(cwd))


def forgotten_path(env=None):
    return os.path.join(data_dir(env), "forgotten.json")


def load_forgotten(env=None):
    """Sessions `sesame forget` keeps out: [{agent, sessionId, path, name, forgottenAt}]."""
    try:
        with open_regular(forgotten_path(env)) as f:
            items = json.loads(f.read().decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return []  # nothing forgotten (or no data directory yet: opening the index will say why)
    except (OSError,) + BAD_JSON as e:
        raise StoreError("cannot read %s: %s" % (forgotten_path(env), e), hint="fix or delete that file")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def save_forgotten(items, env=None):
    """Write the list of forgotten sessions (owner only, never half-written); OSError on failure."""
    path = forgotten_path(env)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    old_umask = os.umask(0o077)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(items, f, indent=1)
        os.replace(path + ".tmp", path)  # never half-written
    finally:
        os.umask(old_umask)


# ==================================================================================================
# Parsers: reading helpers, the registry, then one section per agent
# ==================================================================================================


def read_head(path, n=4096):
    with open_regular(path) as f:
        return f.read(n)


_JSON = json.JSONDecoder()
_json_scan = json.scanner.make_scanner(_JSON)   # the C scanner behind json.loads


def _json_decode(text):
    """json.loads for a str, ~40% faster on the short documents of a session line: the C scanner is
    called directly, without loads's encoding sniffing and decode's two whitespace regex matches per
    call (for a line that begins and ends with its JSON, as json_text leaves it). Anything else
    (whitespace around it, no JSON) goes the usual way, so values and errors are json's own."""
    try:
        obj, end = _json_scan(text, 0)
        if end == len(text):
            return obj
    except StopIteration:
        pass
    return _JSON.decode(text)

# What a line may carry around its JSON: whitespace, NUL bytes, and a UTF-8 byte order mark. A file
# system that loses power while a file grows keeps the new length and fills the blocks never written
# with zeros; the agent then appends after them, so its next record starts with a run of NULs (and
# the file may end with one, without a newline, until then). An editor that saved the file (to cut
# a secret out of it, say) may have put a byte order mark before its first line. The record itself
# is whole: it is read. (A JSON text never starts or ends with these bytes, so nothing else changes.)
LINE_EDGES = b" \t\r\n\x00"
LINE_START = LINE_EDGES + b"\xef\xbb\xbf"  # a byte order mark comes first or not at all


def json_bytes(line):
    """A line (or a whole document) without what may surround its JSON (see LINE_EDGES)."""
    return line.rstrip(LINE_EDGES).lstrip(LINE_START)


def json_text(line):
    """A line's JSON (see json_bytes) as text. A byte that is not UTF-8 (a multi-byte character an
    agent cut in two, a Latin-1 paste written as it came) becomes U+FFFD, so every word around it
    is kept: such a byte can only sit inside a JSON string, where U+FFFD is valid."""
    return json_bytes(line).decode("utf-8", "replace")


def iter_jsonl(path, report, start=0):
    """Yield (offset_after_line, object) for each JSON object line of a file, from byte `start`.

    Never loads the file whole. Blank lines are ignored; lines that are not JSON objects, over
    MAX_LINE_BYTES, or an unfinished last line (an agent still writing) are skipped and counted in
    `report`, never fatal. Invalid UTF-8 is read with replacement characters (see json_text).

    A last line without its newline is read when it is a whole JSON object (see last_record): Cursor
    never ends its agent transcripts with one, and an agent may write a record and its newline apart.
    Its offset is the file's end, so a read resumed there first meets the newline that may come later
    (a blank line) and then what follows.
    """
    with open_regular(path) as f:
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
                obj = last_record(line)
                if obj is None:
                    report.skip("unfinished last line")
                else:
                    yield offset + len(line), obj
                return
            offset += len(line)
            if not line.strip():
                continue
            try:  # (a line of NULs alone is what is left of a lost record: it counts as malformed)
                obj = _json_decode(json_text(line))
            except BAD_JSON:  # JSONDecodeError, nesting too deep
                report.skip("malformed line")
                continue
            if not isinstance(obj, dict):
                report.skip("malformed line")
                continue
            yield offset, obj


def last_record(line):
    """The JSON object a file's last line holds when that line has no newline yet, or None while it
    is still being written. A JSON object ends at its closing brace, so a line that parses as one
    whole object is all of its record: nothing the writer adds can make it another record (a number
    or a string could grow: only objects are records). Blank and NUL-only lines are None too."""
    if not json_bytes(line):
        return None
    try:
        obj = _json_decode(json_text(line))
    except BAD_JSON:
        return None
    return obj if isinstance(obj, dict) else None


def first_json_line(path, limit=65536):
    """The first non-blank line of a file parsed as JSON, or None (a cheap format check). A file that
    cannot be read raises OSError: the indexer then keeps what it had from it and retries later."""
    head = read_head(path, limit)
    for raw in head.split(b"\n"):
        raw = json_text(raw)
        if raw:
            try:
                obj = _json_decode(raw)
            except BAD_JSON:
                return None
            return obj if isinstance(obj, dict) else None
    return None


class Listing:
    """What walk_files saw while one source was listed: every folder it read, with its modification
    time (a file created, removed or renamed in a folder changes the folder's time, so comparing
    these times tells a search whether the source's list of files can have changed without listing
    it again), and the folders it could not read (one unreadable folder must not hide its readable
    neighbours). The indexer opens one around each source's list_files(); parsers never see it."""

    open_listings = []   # the listing in progress is the last one

    def __init__(self):
        self.dirs, self.unreadable = [], []

    def __enter__(self):
        Listing.open_listings.append(self)
        return self

    def __exit__(self, *exc):
        Listing.open_listings.remove(self)


def walk_files(root, match, max_depth, skip_dirs=()):
    """Files under root (or root itself) for which match(name) holds, at most max_depth folders down.

    Sorted, so that runs are reproducible; symlinked folders are not followed (no loops).
    """
    if os.path.isfile(root):
        return [root] if match(os.path.basename(root)) else []
    log = Listing.open_listings[-1] if Listing.open_listings else Listing()
    found = []
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            mtime = os.stat(d).st_mtime_ns  # taken before reading: a change during the read shows next time
            entries = list(os.scandir(d))
        except (OSError, ValueError) as e:   # ValueError: a NUL in a path built from a record's id
            log.unreadable.append((d, getattr(e, "strerror", None) or str(e)))
            continue
        log.dirs.append((d, mtime))
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


def file_mtime_iso(path):
    """A file's modification time as the stored ISO form (for formats without timestamps)."""
    return iso(datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc))


def _load_json_file(path):
    """A whole small JSON file, or None when it is not valid JSON (never raises on bad content; a
    FIFO or device where the file should be is no JSON either)."""
    try:
        f = open_regular(path)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return None
        raise
    with f:
        raw = f.read()
    return load_json_document(raw)


def load_json_document(raw):
    """A whole JSON document from bytes (any encoding json detects), or else from what remains
    without NULs around it (a document a crash left zero-filled at its end, see LINE_EDGES), read
    with replacement characters where a byte is not UTF-8 (see json_text); None when it is neither."""
    try:
        return json.loads(raw)
    except BAD_JSON:
        pass
    try:
        return _json_decode(json_text(raw))
    except BAD_JSON:
        return None


def _list(value):
    """A record's list, or nothing to iterate when an agent wrote something else there (a number, an
    object, a string): one odd record must not cost the file its sessions."""
    return value if isinstance(value, list) else ()


def _id_key(value):
    """A record's id (a tool call's, a message's) as a dictionary key: a string, or a number written
    as one; anything else (an object, a list) is no id: a call is then joined to its result as calls
    without one are."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _json_arg(value, kinds=(dict, list)):
    """Tool arguments stored as a JSON string become a dict (or whatever of `kinds` they hold);
    anything else is kept as it is."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except BAD_JSON:
            return value
        return parsed if isinstance(parsed, kinds) else value
    return value


def _home(env):
    """The user's home folder as the environment given says (tests and discovery pass their own)."""
    return env.get("HOME") or os.path.expanduser("~")


def expand_home(env, path):
    """A path from the environment or a config, with a leading ~ meaning env's home folder."""
    if path == "~" or path.startswith("~/") or path.startswith("~" + os.sep):
        return _home(env) + path[1:]
    return os.path.expanduser(path)  # ~user


def env_path(env, name):
    """The path an environment variable names (~ expanded), or None when it is unset or empty."""
    return expand_home(env, env[name]) if env.get(name) else None


def xdg_data(env):
    """$XDG_DATA_HOME or ~/.local/share, as the XDG base directory rules say; the agents that follow
    them (OpenCode, Kilo, Amp, Goose) do so on every platform, macOS included."""
    return env_path(env, "XDG_DATA_HOME") or os.path.join(_home(env), ".local", "share")


def agent_dir(env, var, *default):
    """An agent's folder: $VAR when set (with ~ expanded), else ~/<default...>. Every parser finds
    its home through env (never the process's own HOME), so discovery follows the environment given."""
    return env_path(env, var) or os.path.join(_home(env), *default)


class RemoteEnv(dict):
    """Another machine's environment as default_roots reads it (`sync` works out a remote's session
    folders with the same parsers): its variables, with every absolute path moved under `mirror` so
    that a root derived from them lies there (anything else was not derived from the remote's own
    environment and is not the remote's to copy), its OS (`platform`, as sys.platform spells it) and
    the folders it is known to have (`folders`, remote paths). A question about a folder not answered
    yet (`answered`) reads as "no" and is kept in `questions`, to be put to the remote."""

    def __init__(self, variables, mirror, platform, folders=(), answered=()):
        super().__init__(variables)
        self.mirror, self.platform = mirror, platform
        self.folders, self.answered, self.questions = set(folders), set(answered), []

    def _remote(self, kind, path):
        if not path.startswith(self.mirror + "/"):
            return None
        path = path[len(self.mirror):].rstrip("/") or "/"
        if (kind, path) not in self.answered and (kind, path) not in self.questions:
            self.questions.append((kind, path))
        return path

    def isdir(self, path):
        path = self._remote("isdir", path)
        return path in self.folders

    def subdirs(self, path):
        path = self._remote("subdirs", path)
        return sorted(self.mirror + f for f in self.folders if path and os.path.dirname(f) == path)


def root_isdir(env, path):
    """Whether the folder exists on the machine env describes (some agents' places count only when
    present): here os.path.isdir, for a remote what it said (RemoteEnv)."""
    return env.isdir(path) if isinstance(env, RemoteEnv) else os.path.isdir(path)


def root_subdirs(env, path):
    """The folders inside a folder (full paths, sorted) on the machine env describes."""
    if isinstance(env, RemoteEnv):
        return env.subdirs(path)
    try:
        return sorted(e.path for e in os.scandir(path) if e.is_dir())
    except OSError:
        return []


def env_platform(env):
    """The OS whose layout the agents follow on the machine env describes (sys.platform's spelling:
    "darwin" keeps app data in ~/Library/Application Support)."""
    return env.platform if isinstance(env, RemoteEnv) else sys.platform


def open_agent_db(path, attempts=5, timeout=1.0):
    """Open an agent's SQLite store strictly read-only.

    With a -wal file beside it the newest rows live there, so it is opened `mode=ro` (which reads the
    WAL); without one, `immutable=1` reads the file without taking locks or creating a -shm file in
    the agent's folder. A store that is locked (the agent is writing) is retried briefly; after that
    the OSError raised here makes the indexer skip the file with a warning and retry next run. A file
    that is no SQLite database at all (another agent's file under a shared folder) is NotASessionFile:
    nothing to retry.
    """
    from urllib.parse import quote
    open_regular(path).close()  # what is not a regular file is refused here: SQLite would wait on a FIFO
    mode = "mode=ro" if os.path.exists(path + "-wal") else "mode=ro&immutable=1"
    uri = "file:%s?%s" % (quote(os.path.abspath(path)), mode)
    last = None
    for attempt in range(attempts):
        try:
            con = sqlite3.connect(uri, uri=True, timeout=timeout)
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return con
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:   # (a damaged schema's text)
            last = e
            if "locked" not in str(e) and "busy" not in str(e):
                break
            time.sleep(0.2 * (attempt + 1))
    if "not a database" in str(last):
        raise NotASessionFile("not an SQLite store")
    raise store_failure(last)


class AgentStore:
    """open_agent_db as a context: the connection, closed after; an SQLite error raised inside is
    what store_failure makes of it."""

    def __init__(self, path):
        self.con = open_agent_db(path)

    def __enter__(self):
        return self.con

    def __exit__(self, kind, exc, tb):
        self.con.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise store_failure(exc) from exc
        return False


# What SQLite says of a store whose pages are damaged (a disk error, a copy cut short), as opposed to
# one of another schema: the file cannot be read now, and what was indexed from it is kept.
_DAMAGED_STORE = ("malformed", "disk image", "disk I/O", "can't decode", "codec")


def store_failure(exc):
    """What a failed read of an agent's SQLite store means: busy (retried next run), damaged (an
    OSError: kept as indexed, read again when it changes) or not a store of the expected kind
    (recorded as not a session file)."""
    if "locked" in str(exc) or "busy" in str(exc):
        return OSError(errno.EBUSY, "store busy (%s)" % exc)
    if isinstance(exc, UnicodeDecodeError) or any(w in str(exc) for w in _DAMAGED_STORE):
        return OSError(errno.EIO, "damaged SQLite store (%s)" % exc)
    return NotASessionFile("unknown schema (%s)" % exc)


class Parser:
    """What every agent's parser provides: a subclass in its own section, registered with @register.

    Identity (class attributes, all required):
    id            parser id used in the config, in --agent and in the JSON (`agent`, also `source`)
    label         the agent's name as people write it
    version       bump when the parser changes what it produces, and every parser's when the text
                  rules all chunks go through change (tool_text, clean_text): its files are then
                  read again, a share at each search (REREAD_BYTES), all by `sesame index`
    verified      the newest agent release whose files were checked against this parser, and when
                  ("2.1.197, 2026-11-24"); the README's Sources table is tested against it
    a docstring   what the agent writes and where, which record types are read, what is skipped

    Drift (class attributes, required: the parser-contract test fails without them):
    records, skipped_records   the record types the parser reads, and those it skips on purpose
                  (state, telemetry: nothing to search); an empty `records` says the format has no
                  typed records (Aider's Markdown)
    blocks, skipped_blocks     the same for content blocks inside messages, when the format has them
    version_field the record field naming the agent release that wrote it ("version", "cli_version")
    The parse loop takes every record's type through record_type() and every block's through
    block_type(): a type in neither set is counted in the report (`status` shows it as drift), and
    the version a record names is noted (a version kept outside the records, in a session row or a
    header, goes to report.saw_version). Only what has no type name (the protobuf fields of Cursor's
    store) is counted where it is read.

    Hooks:
    default_roots(env)  where the agent keeps sessions when nothing is configured, from `env` only
                  (agent_dir, env_path, expand_home; never the process's own HOME); a folder that
                  decides a root is looked for with root_isdir / root_subdirs, the OS layout read
                  with env_platform (env may describe a remote machine: RemoteEnv)
    list_files(root)    the session files under one root, always through walk_files (it records the
                  folders read: a search re-lists a source only when one of their times changed)
    project_files  agents that keep their files inside each project (no default place): the ends of
                  those files' paths, as patterns (`*.aider.chat.history.md`, `.specstory/history/*.md`);
                  the base list_files then lists them (project_files()), and `sync` copies the same
                  files from a remote's project folders (`remote add --projects`)
    parse(path, report) one file -> [Session]; NotASessionFile for a file of another format (never
                  any other exception for bad content); bad lines are counted in `report`; only
                  the chunk kinds of KIND_COLUMN; times through norm_time (UTC, "...Z")
    sidecars(path)      other files whose change changes what `path` yields (titles, metadata): a
                  file is re-read when it or a sidecar changed
    folder_levels  how many folders above a session file the agent writes in as the session goes
                  on (Kimi Code: 2): a change of one of them has the file checked, as its own does
    session_folders  True when the folders two levels below the source's own or more belong to one
                  session each (<project>/<session>/..., Claude Code's sub-agents), written only
                  while <project>/<session>.<ext> is: a search compares them with that file
    dated_folders  True when the agent writes each session in a folder named by the day it started
                  (.../YYYY/MM/DD) and goes on in that file: a past day's folder (quiet for two days,
                  or named two days back) is compared a slice at a time
    session_marks(path), parse_sessions(path, report, only)  for a store of many sessions (a
                  database): a cheap mark per session, and a read of some sessions only, so that a
                  store that changed is read again for the sessions whose mark moved
    SQLITE_SUFFIXES     an agent's SQLite store has one of these name endings, so that a change in
                  its -wal file (where a running agent's newest rows are) counts as the store changing
    resumable     True for append-only files read from a checkpoint: parse(path, report,
                  resume=, limit=) sets `session.checkpoint` at each clean line (see below)
    new_run(state_dir)  called at the start of every index run: drop what was cached about the disk;
                  state_dir: the index's folder, where a parser may keep what it learned about the
                  disk between runs (a file of its own; it may be read-only)
    resume_command(row)  the shell command that resumes a stored session, or None; `row` is the
                  session as the index holds it (session_dict: "agent", "session_id", "path",
                  "cwd"...), not a Session
    retention(env)      how long the agent keeps transcripts, as its settings say, or None
    session_env, current_sessions(env)  how the agent tells a command which session it runs in
    journal, start_mark(root), project_journals(root), running, updates  what the agent writes
                  outside the session when a session is used, so that an old one resumed in another
                  folder is found by the next search (a prompt history naming sessions; a folder
                  whose time changes at every start; a prompt history per project; a file per
                  running process naming its session; a store stamping a session's row when it is
                  written): see read_journals
    """

    id = label = ""
    version = 1
    project_files = ()
    verified = ""   # status shows it beside the versions the records name
    records = None  # not declared: the parser-contract test fails
    skipped_records = ()
    blocks = skipped_blocks = ()
    version_field = None
    # A resumable parser reads append-only files and can stop and restart at a "clean" line (one
    # after which no chunk is waiting for more lines, e.g. a tool call for its result):
    # parse(path, report, resume=checkpoint, limit=bytes) -> sessions whose `checkpoint` says where
    # to go on. The indexer uses it both to read only the bytes appended since the last run and to
    # read a huge file in slices of bounded memory; both give exactly what one full parse gives.
    resumable = False

    def __init_subclass__(cls, **kw):
        # The declarations as two sets of exact names and two tuples of family prefixes ("llm.*"):
        # record_type runs for every line of every file, so its usual answer is one set lookup.
        super().__init_subclass__(**kw)
        for name, declared in (("_known_records", tuple(cls.records or ()) + tuple(cls.skipped_records)),
                               ("_known_blocks", tuple(cls.blocks) + tuple(cls.skipped_blocks))):
            setattr(cls, name, frozenset(declared))
            setattr(cls, name + "_families", tuple(k[:-1] for k in declared if k.endswith("*")))

    @classmethod
    def record_type(cls, report, record, key="type", family=""):
        """The type of one record, which the parse loop then dispatches on. A type the parser neither
        reads nor skips on purpose is counted as drift (`family` names the kind of record in the
        count, e.g. "event "); the agent version the record names is noted."""
        rtype = record.get(key) if isinstance(record, dict) else None
        if cls.version_field and isinstance(record, dict):
            report.saw_version(record.get(cls.version_field))
        if not _declared(rtype, cls._known_records, cls._known_records_families):
            report.unrecognized(family + str(rtype))
        return rtype

    @classmethod
    def block_type(cls, report, block, key="type"):
        """The type of one content block of a message, counted as drift like record_type's."""
        btype = block.get(key) if isinstance(block, dict) else None
        if not _declared(btype, cls._known_blocks, cls._known_blocks_families):
            report.unrecognized("block " + str(btype))
        return btype

    def default_roots(self, env):
        return []  # (an agent that keeps its files inside each project has no default place)

    def list_files(self, root):
        return project_files(root, self.project_files) if self.project_files else []

    def parse(self, path, report):
        raise NotImplementedError

    def resume_command(self, row):
        return None

    def retention(self, env):
        """How long the agent keeps its transcripts before deleting them, as the user's settings
        say: {"days": N, "setting": where it is set}; None when it keeps them (status reports it:
        what Sesame indexed stays after the agent deletes it, see keepDeletedSessions)."""
        return None

    # Environment variables through which the agent tells the commands it runs (and its MCP
    # servers) which session they run inside; their values are session ids. See current_sessions.
    session_env = ()

    def current_sessions(self, env):
        """Session ids of this agent's sessions that the calling process runs inside; [] when the
        agent does not say. Search marks such a result `current` and ranks it after the others: it
        holds the very query the agent just ran."""
        return [env[name].strip() for name in self.session_env if env.get(name, "").strip()]

    def checkpoint_holds(self, path, checkpoint):
        """Whether a resumable parser can go on from this checkpoint of an unchanged prefix: False when
        what the state was read with, beside the file itself, has changed (the file is read whole)."""
        return True

    def new_run(self, state_dir=None):
        """Called at the start of every index run: forget what was cached about the disk (a process
        that lives long, `watch` or `mcp`, must see a folder created after it started)."""

    def sidecars(self, path):
        return []

    # How many folders above a session file its agent may write (create, rename, remove a file) when
    # the session goes on: a change of one of them has the file checked, as its own folder's does.
    folder_levels = 0

    # Whether the folders two levels below the source's own or more belong to one session each
    # (<project>/<session>/..., written only while <project>/<session>.<ext> is): a search then
    # compares them with that file, not every time (see plan_quick).
    session_folders = False

    # Whether the agent writes each session in a folder named by the day it started (.../YYYY/MM/DD,
    # Codex): such a folder gets new files on that day only (a session resumed later is appended to
    # its file, which leaves the folder's time as it is), so a search compares a past day's folder a
    # slice at a time (see plan_quick), not the ~1,000 of a long history every time.
    dated_folders = False

    def session_marks(self, path):
        """For a store holding many sessions (an agent's database): {session id: a JSON value that
        changes whenever what the session holds changes}, from a cheap query; None when it cannot
        tell (the store is then read whole). When the store changes, only the sessions whose mark
        moved (or that are new) are read again and rewritten (see parse_sessions); an assistant's
        database changes at every message, and reading all of a 50 MB one took 7 s per search."""
        return None

    def parse_sessions(self, path, report, only):
        """The sessions of a store whose ids are in `only` (see session_marks); a parser whose store
        can be read session by session reads just those."""
        return [s for s in self.parse(path, report) if s.session_id in only]

    # The agent's change journal, when it keeps one: (file name beside the source folder, the keys
    # that hold a session id in its lines). The agent appends a line naming the session on every
    # prompt, whatever folder it runs in; each search reads the lines added since the last one and
    # checks the files of the sessions they name (see read_journals).
    journal = None
    # A folder beside the source folder where the agent keeps one small JSON file per running
    # process, naming the session it runs, and the key that holds the session id: (folder name,
    # key), or None. Each search compares the files of the sessions running (see read_journals);
    # once read, a file is among those written lately, which every search compares.
    running = None
    # A store of the agent's, beside the source folder, that stamps a session's row whenever the
    # session is written, whatever runs it (a prompt typed, a headless run): (its file name, with
    # "*" for a version number: the highest counts; the table; the id column; the stamp columns, the
    # first the store has counts), or None. When the store changed, a search compares the sessions
    # stamped since the last one.
    updates = None

    def start_mark(self, root):
        """For an agent that keeps no journal: the folder (or file: an SQLite store counts with its
        -wal file) whose time changes whenever the agent starts, for sessions kept in `root`, or None.
        After it changes, each search compares every file of the source until one that had been
        quiet is written (see read_journals)."""
        return None

    def project_journals(self, root):
        """For an agent that appends every prompt to a file per project that does not name the
        session: (the folder of those files, a function from a file's name to the folder under `root`
        holding that project's sessions, or None), or None. When such a file changes, every file of
        its project's folder is compared (see read_journals)."""
        return None


def resume_in_folder(row, command):
    """`cd <the session's folder> && <command> <id>`, for an agent that looks sessions up from the
    folder it runs in; None for a sub-agent's session (opened from its parent's) or without a folder."""
    if not row.get("session_id") or row.get("parent") or not row.get("cwd"):
        return None
    return "cd %s && %s %s" % (shell_quote(row["cwd"]), command, shell_quote(row["session_id"]))


def _start_mark(root, name, lock):
    """The folder above `root` when `root` is called `name` and that folder holds `lock`, the file
    the agent locks at every start (see Parser.start_mark); else None."""
    root = root.rstrip(os.sep)
    above = os.path.dirname(root)
    return above if os.path.basename(root) == name and os.path.isfile(os.path.join(above, lock)) else None


def _declared(value, names, families):
    """Whether a record or block type is declared: one of `names`, or a type that begins with one of
    `families` (a declaration ending in "*", such as Kimi's "llm.*" operations)."""
    try:
        if value in names:
            return True
    except TypeError:   # a list or an object where a type name belongs
        return False
    return bool(families) and isinstance(value, str) and value.startswith(families)


# The registry: parser id -> the one instance of its class, in the order the classes are registered
# below. That order is discovery priority: when two sources list the same file, the first source
# (hence the first parser) wins it, and `sources`, `status` and `--agent` list agents in this order.
PARSERS = {}


def register(cls):
    PARSERS[cls.id] = cls()
    return cls


def current_sessions(env):
    """{(agent, session id)} of the sessions the calling process runs inside, as agents tell it."""
    return {(p.id, sid) for p in PARSERS.values() for sid in p.current_sessions(env)}


# -------------------------------------------------------------------------------------------------
# Parser toolkit: what the agents' sections use (commands, tool calls, JSON sidecars, homes, walks).
# An agent's section holds only that agent; a helper two agents need lives here.
# -------------------------------------------------------------------------------------------------


def shell_quote(s):
    return s if re.fullmatch(r"[A-Za-z0-9_./:@%+=,-]+", s or "") else "'" + (s or "").replace("'", "'\\''") + "'"


def read_pi_message(s, m, role, ts, tools, report):
    """One `message` entry of the pi session format (pi, and OpenClaw which writes the same): user
    text, assistant text / thinking / tool calls, a toolResult joined to its call through `tools`
    (the session's ToolCalls), bashExecution, custom and hook messages."""
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
            elif PiParser.block_type(report, block) == "text" and isinstance(block.get("text"), str):
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
            tools.call(block.get("id"), block.get("name"), block.get("arguments"), ts=ts)
    elif role == "toolResult":
        tools.result(m.get("toolCallId"), text_of(content), bool(m.get("isError")), name=m.get("toolName"), ts=ts)
    elif role == "bashExecution":
        args = {"command": m.get("command")}
        s.add("tool", tool_text("bash", args, m.get("output") or ""), role="user", tool="bash", ts=ts)
    elif role in ("custom", "hookMessage"):
        s.add("custom", text_of(content), role="custom", ts=ts)
    else:
        report.skip("unknown message role")


# Tool calls and commands (Claude Code, Codex and others).

_UUID_RE = LazyPattern(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _is_abs_path(p):
    return isinstance(p, str) and (p.startswith(("/", "~", "\\\\")) or bool(re.match(r"^[A-Za-z]:[\\\\/]", p)))


def _text_key(text):
    """Whitespace-insensitive identity of a message text, to recognise the same text twice."""
    return " ".join((text or "").split())


def _command_string(cmd):
    """A shell command as the user would type it: Codex writes ["bash", "-lc", "ls"], Claude "ls"."""
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        if len(cmd) >= 3 and os.path.basename(cmd[0]) in ("bash", "sh", "zsh", "pwsh", "powershell") \
                and cmd[1] in ("-lc", "-c", "-Command"):
            return cmd[2]
        return " ".join(shell_quote(c) for c in cmd)
    return cmd


class _Entries:
    """Chunks under construction. Tool calls stay open until their result arrives (joined by call
    id), and some entries are only dropped at the end (duplicated streams), so parsers collect
    entries here and hand them to Session.add once the whole file is read."""

    def __init__(self):
        self.items = []
        self.calls = {}            # call id -> open tool entry
        self.unnamed_calls = collections.deque()   # tool entries without an id, joined in order (old fixtures)

    def add(self, kind, text, ts=None, role=None, **extra):
        e = dict(kind=kind, text=text, ts=ts, role=role, **extra)
        self.items.append(e)
        return e

    def tool(self, name, args, ts=None, call_id=None, role="assistant", **extra):
        name, call_id = str(name or "tool"), _id_key(call_id)
        e = self.add("tool", None, ts=ts, role=role, tool=name, args=args, output=None, is_error=False, **extra)
        if call_id:
            self.calls[call_id] = e
        else:
            self.unnamed_calls.append(e)
        return e

    def result(self, call_id, output, is_error=False, ts=None, name=None):
        """Attach a tool result to its call; a result without a known call becomes its own chunk."""
        call_id = _id_key(call_id)
        e = self.calls.pop(call_id, None) if call_id else None
        if e is None and self.unnamed_calls:
            e = self.unnamed_calls.popleft()
        if e is None:
            e = self.add("tool", None, ts=ts, role="tool", tool=str(name or "tool"), args=None, output=None,
                         is_error=False)
        e["output"] = output if e["output"] is None else e["output"] + "\n" + output
        e["is_error"] = e["is_error"] or bool(is_error)
        return e

    def into(self, s):
        for e in self.items:
            if e.get("drop"):
                continue
            if e["kind"] == "tool":
                args = e["args"]
                s.add("tool", tool_text(e["tool"], args, e["output"], e["is_error"]), role=e["role"],
                      tool=e["tool"], path=e.get("path") or tool_path(args), ts=e["ts"])
            else:
                s.add(e["kind"], e["text"], role=e["role"], ts=e["ts"])


# Homes, VS Code hosts and bounded walks inside projects.

# Folders a walk through a user's projects never enters: dependencies, build output, caches.
# Hidden folders are skipped too, except the ones an agent keeps its sessions in (`.crush`).
PROJECT_SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", "dist", "build",
                               "target", ".cache"})
PROJECT_WALK_DEPTH = 6

# Editors that host VS Code extensions, each with its own globalStorage folder.
VSCODE_HOSTS = ("Code", "Code - Insiders", "Cursor", "Windsurf", "VSCodium")


class _ProjectSkip:
    """The `skip_dirs` of a walk through projects: the usual heavy folders and hidden ones."""

    def __init__(self, allow_hidden=()):
        self.allow_hidden = allow_hidden

    def __contains__(self, name):
        if name in PROJECT_SKIP_DIRS:
            return True
        return name.startswith(".") and name not in self.allow_hidden


def walk_projects(root, match, allow_hidden=()):
    """Files under a folder of projects for which match(name) holds, without descending into
    dependencies, build output or hidden folders (other than `allow_hidden`)."""
    return walk_files(root, match, max_depth=PROJECT_WALK_DEPTH, skip_dirs=_ProjectSkip(allow_hidden))


def project_hidden(patterns):
    """The hidden folders that project_files patterns name (`.specstory/history/*.md`: .specstory)."""
    return tuple(sorted({part for pat in patterns for part in pat.split("/")[:-1] if part.startswith(".")}))


def project_files(root, patterns):
    """The files of a per-project agent under a folder of projects (or the file itself, configured
    alone): those whose path ends like one of `patterns` (Parser.project_files; a pattern's parts
    are matched one by one with fnmatch, so `*` stays within a name), found by walk_projects."""
    import fnmatch
    cut = [pat.split("/") for pat in patterns]

    def ends_like(path):
        parts = path.split(os.sep)
        return any(len(parts) >= len(c) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts[-len(c):], c))
                   for c in cut)
    if os.path.isfile(root):
        return [root]
    names = {c[-1] for c in cut}
    found = walk_projects(root, lambda n: any(fnmatch.fnmatchcase(n, m) for m in names), project_hidden(patterns))
    return [f for f in found if ends_like(f)]


def vscode_global_storage(env):
    """Every globalStorage folder of every VS Code-like editor on Linux, macOS and Windows that exists."""
    home = _home(env)
    bases = [env_path(env, "XDG_CONFIG_HOME") or os.path.join(home, ".config"),
             os.path.join(home, "Library", "Application Support")]
    if env.get("APPDATA"):
        bases.append(env["APPDATA"])
    found = []
    for base in bases:
        for host in VSCODE_HOSTS:
            d = os.path.join(base, host, "User", "globalStorage")
            if root_isdir(env, d):
                found.append(d)
    return found


def vscode_user_dirs(env):
    """Every `User` folder of every VS Code-like editor on Linux, macOS and Windows that exists (it
    holds globalStorage/ and workspaceStorage/)."""
    return [os.path.dirname(d) for d in vscode_global_storage(env)]


def file_uri_path(uri):
    """The local path a `file://` URI names (percent-decoded; `file:///c%3A/x` -> `c:/x` on Windows),
    a plain path as it is, None for other schemes (remote workspaces: vscode-remote://...)."""
    if not isinstance(uri, str) or not uri:
        return None
    if "://" not in uri:
        return uri
    if not uri.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse
    p = unquote(urlparse(uri).path)
    return p[1:] if re.match(r"^/[A-Za-z]:", p) else p


def utc_text(value):
    """A time SQLite wrote as text without a zone ("2026-04-07 08:55:40", CURRENT_TIMESTAMP and
    Rust's NaiveDateTime write UTC so) -> the stored ISO form; anything else as norm_time reads it."""
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?", value.strip()):
        value = value.strip().replace(" ", "T") + "Z"
    return norm_time(value)


ZSTD_SECONDS = 30


def _zstd_module():
    """The standard library's compression.zstd (Python 3.14+, PEP 784, an optional module there),
    imported by name so that older Pythons (and import checkers) see no missing import; else None."""
    import importlib
    try:
        return importlib.import_module("compression.zstd")
    except ImportError:
        return None


def zstd_lines(path):
    """The lines of a zstd-compressed file, read as a stream: with compression.zstd, else through the
    `zstd` command; NotASessionFile (the reason) when neither is here (Codex's .jsonl.zst rollouts)."""
    module = _zstd_module()
    if module is not None:
        with module.open(path, "rb") as f:
            yield from f
        return
    import shutil
    import subprocess
    exe = shutil.which("zstd")
    if not exe:
        raise NotASessionFile("zstd compressed; needs Python 3.14+ or the zstd command")
    open_regular(path).close()   # a FIFO is no file to decompress
    with subprocess.Popen([exe, "-d", "-c", "-q", "--", path], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as proc:
        got = False
        for line in proc.stdout:
            got = True
            yield line
        if proc.wait() != 0 and not got:   # (a frame cut at the end after good ones: what came is kept)
            raise NotASessionFile("damaged zstd data")


def iter_jsonl_any(path, report, start=0):
    """iter_jsonl for a plain or a zstd-compressed JSONL file (`.zst`, `.zstd`: Codex's archived
    rollouts, DeepSeek Harness's logs): (offset after the line, object), the offset None in a
    compressed file (it is read whole every time)."""
    if not path.endswith((".zst", ".zstd")):
        yield from iter_jsonl(path, report, start)
        return
    for raw in zstd_lines(path):
        record = json_bytes(raw)
        if not record:
            continue
        if not raw.endswith(b"\n"):   # a last line without its newline: read when it is a whole record
            obj = last_record(raw)
            if obj is None:
                report.skip("unfinished last line")
            else:
                yield None, obj
            return
        else:
            try:
                obj = _json_decode(json_text(record))
            except BAD_JSON:
                report.skip("malformed line")
                continue
        if isinstance(obj, dict):
            yield None, obj
        else:
            report.skip("malformed line")


def zstd_decompress(data):
    """zstd-compressed bytes -> bytes, with what this machine has: the standard library's
    compression.zstd (Python 3.14+, PEP 784; imported by name so that older Pythons see no missing
    import), else the `zstd` command. NotASessionFile (the reason) when neither can: the caller
    reports the file or record as not indexed rather than guessing."""
    module = _zstd_module()
    if module is not None:
        try:
            return module.decompress(data)
        except Exception as e:   # ZstdError: damaged data
            raise NotASessionFile("damaged zstd data (%s)" % e)
    import shutil
    import subprocess
    exe = shutil.which("zstd")
    if not exe:
        raise NotASessionFile("zstd compressed; needs Python 3.14+ or the zstd command")
    try:
        done = subprocess.run([exe, "-d", "-c", "-q"], input=data, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=ZSTD_SECONDS)
    except (OSError, subprocess.SubprocessError) as e:
        raise NotASessionFile("zstd failed (%s)" % e)
    if done.returncode != 0:
        raise NotASessionFile("damaged zstd data")
    return done.stdout


def _primary_global_storage(env):
    """Where VS Code keeps extension data on this OS (named by `sources` even when absent)."""
    home = _home(env)
    if env_platform(env) == "darwin":
        return os.path.join(home, "Library", "Application Support", "Code", "User", "globalStorage")
    if env_platform(env) == "win32" and env.get("APPDATA"):
        return os.path.join(env["APPDATA"], "Code", "User", "globalStorage")
    return os.path.join(env_path(env, "XDG_CONFIG_HOME") or os.path.join(home, ".config"), "Code", "User",
                        "globalStorage")


def _db_columns(con, table):
    return [r[1] for r in con.execute("PRAGMA table_info(%s)" % table)]


def _json_value(value):
    """A SQLite TEXT or BLOB column holding JSON -> the decoded value, or None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except BAD_JSON:
        return None


def _pick(cols, names, alias=""):
    """The columns `names` as a SELECT list (each prefixed with `alias.`), NULL for each not in `cols`
    (a table written by an older release), so that rows unpack the same way whatever it has."""
    return ", ".join(alias + c if c in cols else "NULL" for c in names)


def _table_names(con):
    return {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _one_line(text, limit=100):
    """A title made from a message: its first non-blank line, shortened."""
    for line in (text or "").splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"
    return None


class ToolCalls:
    """Tool chunks of one session by call id: the call adds a chunk, its result (or a late start
    event with the arguments) rewrites that chunk instead of adding a second one. A repeated call id
    is the same call; a result whose call is unknown becomes a chunk of its own when it says something.

    The toolkit's one joiner for parsers that add chunks as they read (pi, omp and OpenClaw through
    read_pi_message too). Joined apart: _Entries (Claude Code, Codex: entries are kept until the whole
    file is read, since a duplicated stream drops some at the end), Gemini's _history (calls keyed by
    id or, lacking one, by name: here a second call of the same name would be taken for the first)
    and Antigravity's `pending` list (results come in order, with no id)."""

    def __init__(self, session):
        self.session, self.calls = session, {}
        self.waiting = set()   # ids of the calls whose result has not come yet (see Resumption)

    def call(self, call_id, name, args, ts=None, role="assistant"):
        name, call_id = str(name or "tool"), _id_key(call_id)
        if call_id and call_id in self.calls:
            entry = self.calls[call_id]
            if not entry["args"] and args:
                entry["args"] = args
                self._render(entry)
            return
        s = self.session
        before = len(s.chunks)
        s.add("tool", tool_text(name, args), role=role, tool=name, path=tool_path(args), ts=ts)
        if call_id and len(s.chunks) > before:
            self.calls[call_id] = {"idx": len(s.chunks) - 1, "name": name, "args": args, "output": None, "error": False}
            self.waiting.add(call_id)

    def arguments(self, call_id, args):
        """The whole arguments of a call whose arguments came in parts (the chunk is rewritten)."""
        call_id = _id_key(call_id)
        entry = self.calls.get(call_id) if call_id else None
        if entry is not None and args and entry["args"] != args:
            entry["args"] = args
            self._render(entry)

    def give_up(self):
        """Forget the calls still waiting for their result: they keep their chunk, without output, and
        a result that comes later is a chunk of its own (as pi does with PENDING_CALL_LINES)."""
        for call_id in self.waiting:
            self.calls.pop(call_id, None)
        self.waiting.clear()

    def result(self, call_id, output, is_error=False, name=None, ts=None):
        call_id = _id_key(call_id)
        self.waiting.discard(call_id)
        entry = self.calls.get(call_id) if call_id else None
        if entry is None:
            if output or is_error:
                name = str(name or "tool")
                self.session.add("tool", tool_text(name, None, output, is_error), role="tool", tool=name, ts=ts)
            return
        entry["output"], entry["error"] = output, is_error
        self._render(entry)

    def _render(self, entry):
        chunk = self.session.chunks[entry["idx"]]
        chunk.text = cap_text(tool_text(entry["name"], entry["args"], entry["output"], entry["error"]), CHUNK_CAP)
        chunk.path = chunk.path or tool_path(entry["args"])


# JSON sidecars and the smaller JSONL agents.

def _read_json(path, limit=4 << 20):
    """A small JSON sidecar (state.json, summary.json...) as a dict, or None when absent or broken."""
    try:
        obj = _load_json_file(path) if os.path.getsize(path) <= limit else None
    except OSError:
        return None
    return obj if isinstance(obj, dict) else None


def _str(v):
    return v.strip() if isinstance(v, str) and v.strip() else None


# Gemini CLI and Qwen Code write a shell command's result as fields: "Command: ...\nDirectory: ...\n
# Output: ...\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID:
# 123" (newer releases: Output, then the fields that say something). A failed command is a "success"
# whose fields say "Exit Code: N". The fields are the harness's, alike in every call ("process group
# pgid" matched every session that ran a command): the output is kept, and a failure said first as
# "Exit code N", as for the other agents.
SHELL_EXIT_RE = LazyPattern(r"^Exit Code: (-?\d+)\s*$", re.M)
_SHELL_FIELDS_TAIL = LazyPattern(r"(?:\n(?:Error: \(none\)|Exit Code: -?\d+|Signal: (?:\(none\)|-?\d+)|"
                                 r"Background PIDs: [^\n]*|Process Group PGID: (?:\(none\)|\d+)))+\s*\Z")


def shell_fields(output):
    """A Gemini-style shell result without its fields (see above); the text as it is otherwise."""
    text = output or ""
    if text.startswith("Command: "):   # (the command is the call's own argument; it may span lines)
        at = text.find("\nDirectory: ")
        if at < 0:
            return output
        text = text[at + 1:]
    if text.startswith("Directory: "):
        end = text.find("\n")
        if end < 0:
            return output
        text = text[end + 1:]
    if not text.startswith("Output: "):   # (a result of Stdout and Stderr fields, older: as it is)
        return output
    text = text[8:]
    tail = _SHELL_FIELDS_TAIL.search(text, max(0, len(text) - 400))
    code = 0
    if tail:
        m = SHELL_EXIT_RE.search(tail.group().strip())
        code = int(m.group(1)) if m else 0
        text = text[:tail.start()]
    if text.strip() == "(empty)":
        text = ""
    return ("Exit code %d\n" % code if code else "") + text


def _out_text(v):
    """A tool output of any shape -> text (strings as is, blocks via text_of, the rest as JSON)."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        t = text_of(v)
        if t:
            return t
    if isinstance(v, dict):
        for k in ("output", "stdout", "text", "content", "error"):
            if isinstance(v.get(k), str) and len(v) <= 3:
                parts = [v[k]]
                if k == "stdout" and isinstance(v.get("stderr"), str) and v["stderr"]:
                    parts.append(v["stderr"])
                return "\n".join(parts)
    try:
        return json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(v)


_REMINDER_RE = LazyPattern(r"^\s*<system-reminder>.*?</system-reminder>\s*", re.S | re.I)


def _split_reminders(text):
    """Leading <system-reminder> blocks are injected by the agent: (injected, typed)."""
    injected = []
    while True:
        m = _REMINDER_RE.match(text)
        if not m:
            break
        injected.append(m.group(0).strip())
        text = text[m.end():]
    return "\n".join(injected), text


def _add_user(s, text, ts):
    """A user message whose head may be injected reminders: those go to context, the rest to user."""
    if not isinstance(text, str):
        return
    injected, typed = _split_reminders(text)
    s.add("context", injected, role="user", ts=ts)
    s.add("user", typed, role="user", ts=ts)


def _finish_times(s, path):
    """A session whose records name no time at all is dated by its file."""
    if s.created is None:
        s.created = s.modified = file_mtime_iso(path)


# Resumable parsing of append-only JSONL (see Parser.resumable).

def text_digest(text):
    """A short stand-in for a text in a checkpoint's state (stored with the file row: the digest keeps
    the text itself, and any secret in it, out of there)."""
    return "%08x" % zlib.crc32((text or "").encode("utf-8", "surrogatepass"))


class Resumption:
    """The bookkeeping of one resumable parse of a JSONL file: where it starts (0, or the checkpoint
    of the last read), the state carried over, the last clean line seen, and the byte limit.

    `state` holds what the parser keeps across lines (ids, names, digests of recent texts); its values
    are replaced, never changed in place (each clean line takes a shallow copy). The session's
    created/modified travel in it too, and `tail`, the (kind, digest) of the last chunks written
    before the checkpoint, so that a parser can recognise a repeat of one of them (`recent`).
    """

    TAIL = 3

    def __init__(self, s, resume, limit, **state):
        self.s, self.limit = s, limit
        self.start = resume["offset"] if resume else 0
        self.seq = resume["seq"] if resume else 0
        self.state = dict(resume["state"]) if resume else dict(state, created=None, modified=None, tail=[])
        s.created, s.modified, s.complete = self.state["created"], self.state["modified"], True
        self.lines, self.waiting_since = 0, None
        self.mark = (self.start, 0, dict(self.state))

    def recent(self):
        """(kind, digest) of the session's last TAIL chunks, those read before the checkpoint included."""
        own = [(c.kind, text_digest(c.text)) for c in self.s.chunks[-self.TAIL:]]
        return ([tuple(t) for t in self.state["tail"]] + own)[-self.TAIL:]

    def line_done(self, offset, waiting=False, give_up=None, settled=True):
        """Called after each line (ending at byte `offset`). The line is clean when no tool call waits
        for its result (`waiting`; a wait of more than PENDING_CALL_LINES lines is given up through
        give_up(), as a full read gives it up) and nothing else is open (`settled`: e.g. a chunk that
        streamed parts still extend). Returns True when the parse stops here: a clean line at or past
        the byte limit (never before the first chunk: a slice that gives nothing only costs a read)."""
        self.lines += 1
        if waiting:
            if self.waiting_since is None:
                self.waiting_since = self.lines
            if give_up is None or self.lines - self.waiting_since <= PENDING_CALL_LINES:
                return False
            give_up()
        self.waiting_since = None
        if not settled:
            return False
        self.state["created"], self.state["modified"] = self.s.created, self.s.modified
        self.mark = (offset, len(self.s.chunks), dict(self.state))
        if self.limit and offset - self.start >= self.limit and (self.s.chunks or self.seq):
            self.s.complete = False
            return True
        return False

    def finish(self):
        """Put the last clean line's checkpoint on the session (the next read goes on from there)."""
        offset, n, state = self.mark
        own = [[c.kind, text_digest(c.text)] for c in self.s.chunks[max(0, n - self.TAIL):n]]
        state["tail"] = ([list(t) for t in state["tail"]] + own)[-self.TAIL:]
        self.s.checkpoint = {"offset": offset, "seq": self.seq + n, "state": state}


# -------------------------------------------------------------------------------------------------
# pi (badlogic/pi-mono): ~/.pi/agent/sessions/--<cwd>--/<timestamp>_<id>.jsonl
# -------------------------------------------------------------------------------------------------


@register
class PiParser(Parser):
    """pi session files, versions 1 to 3.

    The header (first line) carries id, cwd and creation time; the name is the latest non-empty
    `session_info`. Every branch of the tree is indexed (an abandoned branch is still something the
    user did). Tool calls are joined to their results by tool call id.
    """

    id, label, version = "pi", "pi", 4
    verified = "0.73.1, 2026-11-25"
    records = ("message", "compaction", "branch_summary", "custom_message", "session_info")
    # settings and extension state: nothing a user would search for (the header is read apart)
    skipped_records = ("model_change", "thinking_level_change", "custom", "label", "session")
    blocks, skipped_blocks = ("text", "thinking", "toolCall"), ("image",)

    def __init__(self):
        self._meta_dirs = {}  # session folder -> its sessions-meta folder or None (checked once per run)

    def new_run(self, state_dir=None):
        self._meta_dirs.clear()

    def default_roots(self, env):
        return [os.path.join(agent_dir(env, "PI_CODING_AGENT_DIR", ".pi", "agent"), "sessions")]

    def start_mark(self, root):
        # pi writes nothing global on a prompt, but locks auth.json in its agent folder at every
        # start (proper-lockfile: auth.json.lock made and removed), which changes that folder's
        # time; resuming an old session starts pi (0.73.1, checked with the real CLI). Only for
        # the sessions folder of an agent folder (not a --session-dir of the user's).
        return _start_mark(root, "sessions", "auth.json")

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
        tools = ToolCalls(s)
        pending_since = 0   # line number at which a call last began to wait for its result
        checkpoint = (start, 0, dict(state))
        s.complete = True
        for line_no, (offset, e) in enumerate(iter_jsonl(path, report, start)):
            etype = self.record_type(report, e)
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
                had_calls = bool(tools.waiting)
                read_pi_message(s, m, role, ts, tools, report)
                if tools.waiting and not had_calls:
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
            if tools.waiting and line_no - pending_since > PENDING_CALL_LINES:
                tools.give_up()  # a call whose result never came: keep it without output
            if not tools.waiting:
                checkpoint = (offset, len(s.chunks), dict(state))
                if limit and offset - start >= limit:
                    s.complete = False
                    break
        offset, n_chunks, ck_state = checkpoint
        s.checkpoint = {"offset": offset, "seq": (resume["seq"] if resume else 0) + n_chunks, "state": ck_state}
        s.name = state["name"]
        self._read_meta(s, path)
        s.created = header_ts
        s.modified = norm_time(state["last"]) if state["last"] is not None else header_ts
        _finish_times(s, path)
        return [s]

    def _meta_path(self, path, session_id):
        """pi's optional sessions-meta/<id>.meta.json, beside the sessions folder holding `path`."""
        folder = path.rpartition(os.sep)[0]
        if folder not in self._meta_dirs:  # looked up once per folder: this runs for every file on refresh
            bases = (os.path.dirname(folder), os.path.dirname(os.path.dirname(folder)))
            found = [os.path.join(b, "sessions-meta") for b in bases if os.path.isdir(os.path.join(b, "sessions-meta"))]
            self._meta_dirs[folder] = found[0] if found else None
        meta_dir = self._meta_dirs[folder]
        return os.path.join(meta_dir, session_id + ".meta.json") if meta_dir else None

    def sidecars(self, path):
        """Files whose change changes what this session file yields (see discover)."""
        # The id is read from the file name here (reading every header on each refresh would cost a
        # read per file); a custom id containing "_" is missed until the session file itself changes.
        if self._meta_dirs.get(path.rpartition(os.sep)[0], 0) is None:
            return []  # the usual case, settled once per folder: no sessions-meta beside it
        meta = self._meta_path(path, os.path.basename(path)[:-len(".jsonl")].rsplit("_", 1)[-1])
        return [meta] if meta else []

    def _read_meta(self, s, path):
        """Name, description, summary and tags an extension keeps for the session: indexed with the name
        (they say what the session is about); the name is used when the session has none."""
        meta_path = self._meta_path(path, s.session_id)
        if not meta_path or not os.path.isfile(meta_path):
            return
        try:
            with open_regular(meta_path) as f:
                meta = json.loads(f.read(1 << 20))
        except (OSError,) + BAD_JSON:
            return
        if not isinstance(meta, dict):
            return
        if not s.name and isinstance(meta.get("name"), str) and meta["name"].strip():
            s.name = meta["name"].strip()
        if isinstance(meta.get("summary"), str) and meta["summary"].strip():
            s.summary = meta["summary"].strip()
        tags = meta.get("tags") if isinstance(meta.get("tags"), list) else []
        s.labels = [t for t in [meta.get("description")] + tags if isinstance(t, str) and t.strip()]

    def resume_command(self, row):
        return "pi --session %s" % shell_quote(row["path"])


# -------------------------------------------------------------------------------------------------
# Claude Code (closed source; what 2.1 writes): ~/.claude/projects/<encoded-cwd>/<session-id>.jsonl
# -------------------------------------------------------------------------------------------------

# Wrappers Claude Code puts around text in user-role messages. Their contents were produced by the
# CLI (slash-command scaffolding, local command output, reminders, IDE state), not typed by the human.
_CLAUDE_WRAPPER_RE = LazyPattern(
    r"<(system-reminder|local-command-stdout|local-command-stderr|local-command-caveat|command-name|"
    r"command-message|command-args|command-contents|bash-input|bash-stdout|bash-stderr|"
    r"user-prompt-submit-hook|ide_opened_file|ide_selection|ide_diagnostics|new-diagnostics|"
    r"task-notification)>(.*?)</\1>", re.S)
_CLAUDE_CONTEXT_PREFIXES = (
    "Caveat: The messages below were generated by the user while running local commands",
    "[Request interrupted by user",
)
# The CLI's own sentences around a compaction summary ("This session is being continued from a
# previous conversation that ran out of context. ...", "Continue the conversation from where it left
# off without asking the user any further questions...", the transcript's path): the same in every
# summary, in the talk column, where "session", "conversation" and "context" matched every compacted
# session. The summary the model wrote between them stays.
_CLAUDE_SUMMARY_FRAME_RE = LazyPattern(
    r"\A\s*This session is being continued from a previous conversation that ran out of context\.[^\n]*\n*"
    r"|(?:\n*(?:If you need specific details from before compaction|Continue the conversation from where it left "
    r"off without asking the user any further questions|Please continue the conversation from where we left it "
    r"off without asking the user any further questions)[^\n]*)+\s*\Z")
_CLAUDE_TOOL_REMINDER_RE = LazyPattern(r"\n*<system-reminder>.*?</system-reminder>\n*", re.S)
# Spilled tool results: the transcript holds a preview and the path of the full output.
_CLAUDE_SPILL_RE = LazyPattern(r"(\S*tool-results[/\\][^\s<>\"']+)")
# A failed Bash call: the result text starts with its exit code ("Exit code 3\n..."; the structured
# toolUseResult says "Error: Exit code 3"). Older and some SDK writers leave is_error false.
_CLAUDE_EXIT_RE = LazyPattern(r"^\s*(?:Error: )?Exit code (-?\d+)\b")
SPILL_HEAD_BYTES, SPILL_TAIL_BYTES = 64 * 1024, 16 * 1024
# Sub-agents that replay the parent's conversation, then ask one thing of it: /compact's summariser
# and the side question (`/btw`, 2.1.8x: "This is a side question from the user"). Their files copy
# the parent's records up to that prompt (the same uuids: seen in 2.1.81 to 2.1.92 transcripts).
CLAUDE_COMPACT_PREFIX = "agent-acompact-"
CLAUDE_REPLAY_PREFIXES = (CLAUDE_COMPACT_PREFIX, "agent-aside_question-")
# How many of a session's latest uuids a read remembers: a line repeated within them is indexed once.
CLAUDE_RECENT_UUIDS = 64
# How a file whose first record is a summary starts (see ClaudeCodeParser._folder_summaries), and how
# much of it is read for its summaries (a few hundred bytes each).
_CLAUDE_SUMMARY_HEAD_RE = LazyPattern(rb'(?:\xef\xbb\xbf)?\s*\{\s*"type"\s*:\s*"summary"')
CLAUDE_SUMMARY_BYTES = 64 * 1024
# Summary files changed within this many seconds (and still no larger than CLAUDE_SUMMARY_BYTES) are
# watched (sidecars): a new one renames a session.
CLAUDE_SUMMARY_RECENT = 2 * 24 * 3600
CLAUDE_SUMMARY_SCANS = "claude-summary-files"   # beside the index: see _summary_candidates
CLAUDE_SCAN_SETTLE = 2   # seconds: a folder changed more lately is scanned again next time


def _claude_split_text(text):
    """A user-role text -> [(kind, text)]: what the human typed is "user", wrapped CLI text "context".

    A slash command's arguments and a `!` shell command are typed by the human, so they stay "user".
    """
    out, command = [], None
    for m in _CLAUDE_WRAPPER_RE.finditer(text):
        tag, inner = m.group(1), m.group(2).strip()
        if tag == "command-name":
            command = inner
            out.append(("context", inner))
        elif tag == "command-args" and inner:
            out.append(("user", ("%s %s" % (command, inner)) if command else inner))
        elif tag == "bash-input" and inner:
            out.append(("user", inner))
        elif inner:
            out.append(("context", inner))
    rest = _CLAUDE_WRAPPER_RE.sub("", text).strip()
    if rest:
        out.append(("context" if rest.startswith(_CLAUDE_CONTEXT_PREFIXES) else "user", rest))
    return out


def _claude_block_key(kind, text):
    """A content block's identity within its message, short enough to keep in a checkpoint."""
    return "%s %08x %d" % (kind, zlib.crc32(text.encode("utf-8", "surrogatepass")), len(text))


def _read_head_tail(path):
    """Text of a possibly huge file: all of it when small, else its head and tail (the indexer keeps
    only the head and the tail of a tool output anyway)."""
    size = os.path.getsize(path)
    with open_regular(path) as f:
        if size <= SPILL_HEAD_BYTES + SPILL_TAIL_BYTES:
            return f.read().decode("utf-8", "replace")
        head = f.read(SPILL_HEAD_BYTES)
        f.seek(size - SPILL_TAIL_BYTES)
        tail = f.read()
    return "%s\n[... %d bytes not read ...]\n%s" % (head.decode("utf-8", "replace"),
                                                      size - len(head) - len(tail), tail.decode("utf-8", "replace"))


@register
class ClaudeCodeParser(Parser):
    """Claude Code transcripts: one JSONL file per session, one sub-agent per `agent-*.jsonl`.

    Lines are typed records (`user`, `assistant`, `system`, `summary`, `custom-title`, `ai-title`,
    `attachment`, ...; other types count as drift). Assistant replies are streamed one content block per
    line under a shared `message.id` and are merged back. Tool results arrive in the next `user` line
    and are joined to their `tool_use` by id; outputs spilled to `tool-results/*.txt` are read from
    there. The name is the user's `/rename` (custom-title), else the generated ai-title, else a
    `summary` line about this file.
    """

    session_env = ("CLAUDE_CODE_SESSION_ID",)  # set by 2.1 for the commands and MCP servers it runs
    id, label, version = "claude", "Claude Code", 4
    command = "claude"   # the command that resumes a session (OpenClaude, a fork, runs `openclaude`)
    # <config dir>/history.jsonl, the prompt history behind the up arrow: {display, pastedContents,
    # timestamp (ms), project, sessionId} per prompt (sessionId since 1.0; older lines lack it).
    journal = ("history.jsonl", ("sessionId",))
    # <config dir>/sessions/<pid>.json {pid, sessionId, cwd, startedAt, kind, entrypoint, ...}, made when
    # the process starts and removed when it ends, also for `claude -p` and the Agent SDK, which add
    # nothing to history.jsonl (2.1.197 and 2.1.332, checked with the real CLI).
    running = ("sessions", "sessionId")
    verified = "2.1.332, 2026-11-26"
    records = ("assistant", "user", "attachment", "system", "custom-title", "ai-title", "summary",
               "tool_use", "tool_result")
    # session state with no conversation text; 2.1.3xx also keeps what each API request was made of
    # (`api-request`: parameters and the hashes of its parts; `api-request-blob`: a part, once: the
    # system prompt, reminders, the turns the user and assistant records already hold;
    # `api-request-shape`: the tool schemas), the session's cost and the tools it used.
    skipped_records = ("progress", "file-history-snapshot", "queue-operation", "mode", "permission-mode",
                       "pr-link", "agent-name", "last-prompt", "worktree-state", "relocated", "bridge-session",
                       "frame-link", "atis-latch", "teleported-from", "api-request", "api-request-blob",
                       "api-request-shape", "cost-state", "tools-used")
    blocks = ("text", "thinking", "tool_use", "tool_result")
    # images, encrypted thinking and the API's server-side tool blocks: nothing to read
    skipped_blocks = ("image", "document", "redacted_thinking", "server_tool_use", "web_search_tool_result",
                      "web_fetch_tool_result", "code_execution_tool_result", "bash_code_execution_tool_result",
                      "text_editor_code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
                      "container_upload", "search_result", "tool_reference")
    version_field = "version"

    def default_roots(self, env):
        config = env.get("CLAUDE_CONFIG_DIR")
        if config:  # a comma-separated list is accepted, as several tools do
            return [os.path.join(expand_home(env, d.strip()), "projects") for d in config.split(",") if d.strip()]
        roots = [os.path.join(_home(env), ".claude", "projects")]
        xdg = env_path(env, "XDG_CONFIG_HOME") or os.path.join(_home(env), ".config")
        if root_isdir(env, os.path.join(xdg, "claude", "projects")):
            roots.append(os.path.join(xdg, "claude", "projects"))
        return roots

    def list_files(self, root):
        # projects/<enc>/<sid>.jsonl, <enc>/<sid>/subagents/agent-*.jsonl and
        # <enc>/<sid>/subagents/workflows/wf_*/agent-*.jsonl (journal.jsonl there is not a transcript).
        return walk_files(root, lambda n: n.endswith(".jsonl") and n != "journal.jsonl", max_depth=5,
                          skip_dirs=("tool-results",))

    # <enc>/<sid>/ and its subagents/ are written while <enc>/<sid>.jsonl is: a history of 2,000
    # sessions with sub-agents has 4,000 such folders, ~16 ms of every search to compare them all.
    session_folders = True

    resumable = True

    def parse(self, path, report, resume=None, limit=None):
        """Parse from the start, or from a checkpoint of an earlier parse (appended lines only).

        Stops after `limit` bytes at the next clean line and always records the last clean checkpoint
        in `s.checkpoint` (see Parser.resumable). A line is clean when no tool call waits for its
        result: every chunk so far is then final (a message streamed on after it goes on in a chunk
        of its own, in a whole read as in a resumed one), and what the rest of the file needs is in
        the state: name, times, cwd, the current message's blocks and the latest uuids (to index a
        repeated block or line once).
        """
        stem = os.path.basename(path)[:-len(".jsonl")] if path.endswith(".jsonl") else os.path.basename(path)
        is_subagent = stem.startswith("agent-")
        # A compaction or side-question sub-agent replays the parent's conversation (the same records,
        # uuids and all) before its own prompt: only what comes from that prompt on is its own. Where
        # that is shows at the end only, so such a file is always read whole (it is small and done).
        replay = stem.startswith(CLAUDE_REPLAY_PREFIXES)
        if replay:
            resume = limit = None
        if resume is None:
            head = first_json_line(path)
            if head is None:
                # A first line longer than the peek (a huge pasted prompt) is judged by the records below.
                if not read_head(path, 4096).lstrip(LINE_START).startswith(b"{"):
                    raise NotASessionFile("first line is not JSON")
            elif not isinstance(head.get("type"), str):
                raise NotASessionFile("no Claude Code record on the first line")
        # 1.0-2.0 named sessions by summaries written into *another* file of the folder (see
        # _folder_summaries): the latest of this file's messages that one names gives the name.
        # A resumed read looks only at summaries written lately: only those can name a message written
        # since the last read (see checkpoint_holds and sidecars for the older messages).
        leaf_names, _, sums_at = ({}, [], 0) if is_subagent else \
            self._folder_summaries(os.path.dirname(path), recent=resume is not None)
        if resume:
            state = dict(resume["state"])
            state["sums_at"] = max(state.get("sums_at", 0), sums_at)
        else:
            state = {"sid": None, "cwd": None, "custom-title": None, "ai-title": None, "own": None, "folder": None,
                     "sums_at": sums_at, "first": None, "last": None, "conv": False, "summaries": False,
                     "recent": [], "msg": None, "keys": [], "mids": ""}
        recent = collections.deque(state["recent"], CLAUDE_RECENT_UUIDS)   # a resumed session copies lines
        recent_set = set(recent)
        # The messages seen so far (the end of each message.id): 1.0 copied a resumed conversation's
        # assistant messages, ids and all, into the same file again; a message that comes back after
        # another one is such a copy. (Parallel tool calls go on in the *current* message.)
        mids = state["mids"].split()
        mids_set = set(mids)
        msg = {"id": state["msg"], "keys": set(state["keys"]), "text": None, "thinking": None}
        entries = _Entries()
        s = Session(self.id, stem, path)
        start = resume["offset"] if resume else 0
        own_from = 0                   # a replay: the entry where its own part starts
        pending_since = 0              # line number at which a tool call began to wait for its result
        checkpoint = (start, 0, self._snapshot(state, recent, msg), len(mids))
        for line_no, (offset, rec) in enumerate(iter_jsonl(path, report, start)):
            rtype = self.record_type(report, rec)
            ts = norm_time(rec.get("timestamp"))
            if ts:
                if state["first"] is None or ts < state["first"]:
                    state["first"] = ts
                if state["last"] is None or ts > state["last"]:
                    state["last"] = ts
            if state["sid"] is None and isinstance(rec.get("sessionId"), str):
                state["sid"] = rec["sessionId"]
            if state["cwd"] is None and _is_abs_path(rec.get("cwd")):
                state["cwd"] = rec["cwd"]
            uuid = rec.get("uuid")
            if isinstance(uuid, str):
                if uuid in leaf_names:
                    state["folder"] = leaf_names[uuid]
                # A resumed session copies earlier lines; the same line is indexed once. The message.id
                # merge below handles the other duplication (streamed blocks).
                if rtype in ("user", "assistant") and uuid in recent_set:
                    continue
                if len(recent) == recent.maxlen:
                    recent_set.discard(recent[0])
                recent.append(uuid)
                recent_set.add(uuid)
            if rtype in ("user", "assistant") and rec.get("isSidechain") and not is_subagent and self._warmup(rec, state):
                m = rec.get("message") if isinstance(rec.get("message"), dict) else {}
                entries.add("context", text_of(m.get("content")), ts=ts, role="warmup")
                continue
            had_calls = bool(entries.calls or entries.unnamed_calls)
            if rtype == "assistant":
                state["conv"] = True
                mid = rec["message"].get("id") if isinstance(rec.get("message"), dict) else None
                if isinstance(mid, str) and mid != msg["id"]:
                    key = mid[-12:].replace(" ", "_")
                    if key in mids_set:
                        continue
                    mids.append(key)
                    mids_set.add(key)
                self._assistant(rec, ts, entries, msg, report)
            elif rtype == "user":
                state["conv"] = True
                if replay and self._is_prompt(rec):
                    own_from, state["first"], state["last"] = len(entries.items), ts, ts
                self._user(rec, ts, entries, path, is_subagent, report)
            elif rtype == "attachment":
                self._attachment(rec, ts, entries)
            elif rtype == "system":
                if rec.get("subtype") == "local_command" and isinstance(rec.get("content"), str):
                    for kind, text in _claude_split_text(rec["content"]):
                        entries.add("context", text, ts=ts, role="system")
            elif rtype in ("custom-title", "ai-title"):
                value = rec.get("customTitle" if rtype == "custom-title" else "aiTitle")
                if isinstance(value, str) and value.strip():
                    state[rtype] = value.strip()   # the last one wins
            elif rtype == "summary":
                if isinstance(rec.get("summary"), str) and rec["summary"].strip():
                    state["summaries"] = True
                    # Its leaf among this file's latest messages: it names this session.
                    if not rec.get("leafUuid") or _id_key(rec["leafUuid"]) in recent_set:
                        state["own"] = rec["summary"].strip()
            elif rtype == "tool_use":
                # Very old/drifted files wrote tool calls and results as records of their own (and so
                # does oh-my-opencode: see OhMyOpenCodeParser).
                state["conv"] = True
                entries.tool(rec.get("name") or rec.get("tool_name"), rec.get("input") or rec.get("tool_input"),
                             ts=ts, call_id=rec.get("id") or rec.get("tool_use_id") or self._call_key(rec))
            elif rtype == "tool_result":
                out = rec.get("output") if isinstance(rec.get("output"), str) else \
                    text_of(rec.get("content")) or _out_text(rec.get("tool_output"))
                call_id = rec.get("tool_use_id") or self._call_key(rec)
                if call_id and call_id not in entries.calls and "tool_input" in rec:
                    # oh-my-opencode may change the input on the way (env exports before a bash command):
                    # then the result is the earliest waiting call's of that tool.
                    call_id = next((k for k, e in entries.calls.items() if e["tool"] == rec.get("tool_name")), call_id)
                entries.result(call_id, out or "", rec.get("is_error"), ts=ts, name=rec.get("name") or rec.get("tool_name"))
            # everything else (progress, file-history-snapshot, queue-operation, mode, pr-link, ...) is
            # session state with no conversation text.
            if replay:
                continue
            if entries.calls or entries.unnamed_calls:
                if not had_calls:
                    pending_since = line_no
                if line_no - pending_since <= PENDING_CALL_LINES:
                    continue
                entries.calls.clear()   # a call whose result never came: kept without output
                entries.unnamed_calls.clear()
            # A clean line: what was read is final.
            entries.into(s)
            entries.items.clear()
            msg["text"] = msg["thinking"] = None
            checkpoint = (offset, len(s.chunks), self._snapshot(state, recent, msg), len(mids))
            if limit and offset - start >= limit:
                s.complete = False
                break
        if s.complete and not state["conv"] and not state["custom-title"] and not state["ai-title"]:
            # (Claude Code 1.0-2.0 left such a file when it was started and left without a prompt.)
            raise NotASessionFile("only summaries naming other sessions" if state["summaries"] else
                                  "no Claude Code conversation records")
        if replay:  # the parent holds the replayed part: counted there once, not twice
            del entries.items[:own_from]
            if stem.startswith(CLAUDE_COMPACT_PREFIX):
                # The summary it wrote is in the parent too (its isCompactSummary record), after a
                # prompt every compaction repeats: kept, as context, so it never outranks the parent.
                for e in entries.items:
                    e["kind"] = "context" if e["kind"] != "tool" else "tool"
        entries.into(s)
        offset, n_chunks, ck_state, n_mids = checkpoint
        s.checkpoint = None if replay else {
            "offset": offset, "seq": (resume["seq"] if resume else 0) + n_chunks,
            "state": dict(ck_state, mids=" ".join(mids[:n_mids]))}
        first_sid = state["sid"]
        if not is_subagent and not _UUID_RE.fullmatch(stem) and first_sid:
            s.session_id = first_sid
        s.cwd = state["cwd"]
        if is_subagent:
            s.parent = self._subagent_parent(path, first_sid, stem)
        # Title precedence, as Claude Code shows it: the user's /rename, then the generated title, then
        # a summary line whose leaf is in this file, wherever that line was written.
        s.name = state["custom-title"] or state["ai-title"] or state["own"] or state["folder"]
        s.touch(state["first"])
        s.touch(state["last"])
        _finish_times(s, path)
        return [s]

    @staticmethod
    def _call_key(rec):
        """A call without an id that its result repeats (oh-my-opencode: tool name and input)."""
        if "tool_input" not in rec:
            return None
        return _claude_block_key("call", json.dumps([rec.get("tool_name"), rec["tool_input"]], sort_keys=True,
                                                    default=str))

    @staticmethod
    def _snapshot(state, recent, msg):
        """The state to go on from at a clean line (plain JSON values)."""
        return dict(state, recent=list(recent), msg=msg["id"], keys=sorted(msg["keys"]))

    def __init__(self):
        self._summaries = {}  # project folder -> its summaries and the files holding them (per run)
        self._heads = None    # the summary-file scans kept between runs (see _summary_candidates)
        self._heads_path = None

    def new_run(self, state_dir=None):
        self._summaries.clear()
        self._heads = None
        self._heads_path = os.path.join(state_dir, CLAUDE_SUMMARY_SCANS) if state_dir else None

    def _summary_candidates(self, folder, folder_mtime):
        """The files of a folder changed lately that may start with a summary record: those that do,
        and those too short to tell. A folder's time changes only when a file is created, removed or
        renamed in it, and a file's first line never changes (records are appended), so what a scan
        of the folder found holds until the folder's time changes: it is kept beside the index
        (CLAUDE_SUMMARY_SCANS) and a search does not look at every file of a busy project folder
        again (900 files: ~5 ms a search). Large files are left out: a summary file is small."""
        if self._heads is None:
            self._heads = {}
            try:
                if self._heads_path:
                    with open_regular(self._heads_path) as f:
                        self._heads = json.loads(f.read())
            except (OSError,) + BAD_JSON:
                pass
            if not isinstance(self._heads, dict):
                self._heads = {}
        known = self._heads.get(folder)
        if isinstance(known, list) and len(known) == 2 and known[0] == folder_mtime and isinstance(known[1], list):
            return [p for p in known[1] if isinstance(p, str)]
        found = []
        try:
            for e in os.scandir(folder):
                if not (e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)):
                    continue
                try:
                    if e.stat(follow_symlinks=False).st_size > CLAUDE_SUMMARY_BYTES:
                        continue
                    head = read_head(e.path, 32)
                except OSError:
                    found.append(e.path)  # unreadable now: looked at again
                    continue
                if len(head) < 32 or _CLAUDE_SUMMARY_HEAD_RE.match(head):
                    found.append(e.path)
        except OSError:
            return []
        now = time.time_ns()
        if folder_mtime > now - CLAUDE_SCAN_SETTLE * 10 ** 9:
            return found  # a file created in the same clock tick as the scan would not change its time
        since = now - CLAUDE_SUMMARY_RECENT * 10 ** 9
        self._heads = {k: v for k, v in self._heads.items() if isinstance(v, list) and v and
                       isinstance(v[0], int) and v[0] >= since}   # a folder unchanged that long is not scanned
        self._heads[folder] = [folder_mtime, found]
        if self._heads_path:
            try:
                write_private(self._heads_path, json.dumps(self._heads))
            except OSError:
                pass   # (a read-only data folder: scanned again next time)
        return found

    def _folder_summaries(self, folder, recent=False):
        """({leafUuid: summary}, [files holding them], the newest one's time in ns) of a project
        folder, read once per run; with `recent`, of the small files changed within
        CLAUDE_SUMMARY_RECENT only (then a folder itself unchanged that long costs one stat).

        Claude Code 1.0 to 2.0 (seen up to 2.1.1) titled a session by a `summary` record naming its
        last message (`leafUuid`), written as the first lines of the *next* session file started in
        the folder; a file started and left without a prompt holds nothing else. So only files that
        start with a summary record are read, and only those lines; of several summaries of one leaf,
        the one in the newest file wins."""
        key = (folder, recent)
        if key in self._summaries:
            return self._summaries[key]
        found = []
        since = time.time_ns() - CLAUDE_SUMMARY_RECENT * 10 ** 9 if recent else None
        try:
            if since is None:
                paths = [e.path for e in os.scandir(folder) if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)]
            else:
                changed = os.stat(folder).st_mtime_ns
                # no file created or renamed there lately: nothing; else the files that may be summaries
                paths = [] if changed < since else self._summary_candidates(folder, changed)
        except OSError:
            paths = []
        for path in paths:
            try:
                if since is not None:
                    st = os.stat(path, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode) or st.st_mtime_ns < since or st.st_size > CLAUDE_SUMMARY_BYTES:
                        continue  # (a new summary file is small: summaries, then maybe a first prompt)
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
                try:
                    head = os.read(fd, 32)
                    if _CLAUDE_SUMMARY_HEAD_RE.match(head):
                        head += os.read(fd, CLAUDE_SUMMARY_BYTES)
                        found.append((os.fstat(fd).st_mtime_ns, path, head))
                finally:
                    os.close(fd)
            except OSError:
                continue
        found.sort()
        names = {}
        for _, _, head in found:
            for raw in head.split(b"\n"):
                try:
                    rec = _json_decode(json_bytes(raw).decode("utf-8"))
                except BAD_JSON:
                    break  # the end of what was read, or not JSON
                if not isinstance(rec, dict) or rec.get("type") != "summary":
                    break
                if isinstance(rec.get("leafUuid"), str) and isinstance(rec.get("summary"), str) and rec["summary"].strip():
                    names[rec["leafUuid"]] = rec["summary"].strip()
        self._summaries[key] = (names, [p for _, p, _ in found], found[-1][0] if found else 0)
        return self._summaries[key]

    def sidecars(self, path):
        """The summary files written lately in this session's folder (see _folder_summaries): a new
        one makes the session file look changed, so that it is read again and takes its name. (Once
        such a file is older than CLAUDE_SUMMARY_RECENT, the session file looks changed once more
        and is gone on from where it was read: it is no longer checked for them.)"""
        folder, name = os.path.split(path)
        if name.startswith("agent-"):
            return []
        found = self._folder_summaries(folder, recent=True)[1]   # (none, in most folders: every search asks)
        return [p for p in found if p != path] if found else found

    def checkpoint_holds(self, path, checkpoint):
        # A summary file newer than the last whole read may name one of the messages read then.
        if os.path.basename(path).startswith("agent-"):
            return True
        newest = self._folder_summaries(os.path.dirname(path), recent=True)[2]
        return newest <= (checkpoint.get("state") or {}).get("sums_at", 0)

    @staticmethod
    def _subagent_parent(path, record_session_id, stem):
        # Current layout: <sid>/subagents/[workflows/wf_x/]agent-<id>.jsonl -> the folder name is the
        # parent's session id. Older flat layout: the lines carry the parent's sessionId.
        parts = os.path.normpath(path).split(os.sep)
        if "subagents" in parts:
            i = len(parts) - 1 - parts[::-1].index("subagents")
            if i >= 1:
                return parts[i - 1]
        if record_session_id and record_session_id != stem:
            return record_session_id
        return None

    @staticmethod
    def _is_prompt(rec):
        """A user record that asks something (text, not only tool results; not injected)."""
        if rec.get("isMeta") or rec.get("isCompactSummary") or not isinstance(rec.get("message"), dict):
            return False
        content = rec["message"].get("content")
        return isinstance(content, str) or (isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "text" for b in content))

    content_on_record = False   # oh-my-opencode writes a record's content on the record itself

    @classmethod
    def _message_blocks(cls, rec, report, role):
        """A record's message and its content as a list of blocks (a string is one text block);
        (None, None) when there is nothing to read."""
        m = rec.get("message")
        if m is None and cls.content_on_record and isinstance(rec.get("content"), (str, list)):
            m = {"content": rec["content"]}
        if not isinstance(m, dict):
            report.skip("malformed %s record" % role)
            return None, None
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        return (m, blocks) if isinstance(blocks, list) else (None, None)

    @classmethod
    def _assistant(cls, rec, ts, entries, state, report):
        m, blocks = cls._message_blocks(rec, report, "assistant")
        if m is None:
            return
        # Streaming writes one line per content block, all with the same message.id (and some versions
        # repeat earlier blocks): merge the lines of one message and index each block once. `state` is
        # the current message's: its id, the keys of its blocks, its open text and thinking entries.
        mid = m.get("id") if isinstance(m.get("id"), str) else None
        if mid is None or mid != state["id"]:
            state.update(id=mid, keys=set(), text=None, thinking=None)
        kind_for = "context" if rec.get("isApiErrorMessage") else "assistant"
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = cls.block_type(report, block)
            if btype == "text" and isinstance(block.get("text"), str):
                key, kind, text = _claude_block_key("text", block["text"]), kind_for, block["text"]
            elif btype == "thinking" and isinstance(block.get("thinking"), str):
                key, kind, text = _claude_block_key("thinking", block["thinking"]), "thinking", block["thinking"]
            elif btype == "tool_use":
                key = "tool_use " + block["id"] if isinstance(block.get("id"), str) and block["id"] else \
                    _claude_block_key("tool_use", json.dumps(block.get("input"), sort_keys=True, default=str))
                if key in state["keys"]:
                    continue
                state["keys"].add(key)
                args = block.get("input")
                if isinstance(args, dict) and "command" in args:
                    args = dict(args, command=_command_string(args["command"]))
                entries.tool(block.get("name"), args, ts=ts, call_id=block.get("id"))
                continue
            else:
                continue  # redacted_thinking, server tool blocks, images: nothing to read
            if key in state["keys"] or not text.strip():
                continue
            state["keys"].add(key)
            slot = "thinking" if kind == "thinking" else "text"
            if state[slot] is not None:
                state[slot]["text"] += "\n" + text
            else:
                state[slot] = entries.add(kind, text, ts=ts, role="assistant")

    @staticmethod
    def _warmup(rec, state):
        """Whether a sidechain record belongs to a warm-up: 2.0.x starts each session by sending its
        sub-agents the prompt "Warmup" in a sidechain of the main file, and the model's boilerplate
        answer ("I'm Claude Code, Anthropic's official CLI ...") follows (2.0.19, 2.0.21 transcripts).
        Nobody's words: kept as context, and a file holding only that is no conversation."""
        m = rec.get("message") if isinstance(rec.get("message"), dict) else {}
        parent, warm = rec.get("parentUuid"), state.get("warmup") or []
        if (parent is None and rec.get("type") == "user" and text_of(m.get("content")).strip() == "Warmup") or (
                parent and parent in warm):
            if isinstance(rec.get("uuid"), str):
                state["warmup"] = (warm + [rec["uuid"]])[-20:]   # (state values are replaced, see Resumption)
            return True
        return False

    def _user(self, rec, ts, entries, path, is_subagent, report):
        m, blocks = self._message_blocks(rec, report, "user")
        if m is None:
            return
        origin = rec.get("origin") if isinstance(rec.get("origin"), dict) else {}
        if rec.get("isCompactSummary"):
            default_kind, role = "summary", "compaction"
        elif rec.get("isMeta") or origin.get("kind") == "task-notification":
            default_kind, role = "context", "meta"          # hook feedback, command scaffolding
        elif rec.get("isSidechain") and not is_subagent:
            # Old versions inlined sub-agent conversations; their "user" turns were written by the main
            # agent, not typed by the human.
            default_kind, role = "custom", "sidechain"
        else:
            default_kind, role = "user", ("agent" if is_subagent else "user")
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = self.block_type(report, block)
            if btype == "text" and isinstance(block.get("text"), str):
                if default_kind == "user":
                    for kind, text in _claude_split_text(block["text"]):
                        entries.add(kind, text, ts=ts, role=role if kind == "user" else "context")
                elif default_kind == "summary":
                    entries.add(default_kind, _CLAUDE_SUMMARY_FRAME_RE.sub("", block["text"]), ts=ts, role=role)
                else:
                    entries.add(default_kind, block["text"], ts=ts, role=role)
            elif btype == "tool_result":
                call_id = block.get("tool_use_id") or rec.get("sourceToolUseID")
                output = self._tool_output(rec, block, path, call_id)
                entries.result(call_id, output, block.get("is_error") or self._failed(rec, block), ts=ts)

    @staticmethod
    def _failed(rec, block):
        """A shell result whose text names a non-zero exit code. A structured result ({stdout, ...}) is a
        command that succeeded: its text is what the command printed."""
        content = block.get("content")
        result = rec.get("toolUseResult")
        if isinstance(result, dict) and "stdout" in result:
            return False
        for text in (content if isinstance(content, str) else text_of(content), result):
            m = _CLAUDE_EXIT_RE.match(text) if isinstance(text, str) else None
            if m:
                return int(m.group(1)) != 0
        return False

    @staticmethod
    def _tool_output(rec, block, path, call_id):
        content = block.get("content")
        output = content if isinstance(content, str) else text_of(content)
        result = rec.get("toolUseResult")
        if isinstance(result, dict):
            # Some writers keep only a short stub in the block; the structured result has the output.
            stdout, stderr = result.get("stdout"), result.get("stderr")
            if isinstance(stdout, str) and stdout.strip() and stdout.strip() not in output:
                output = stdout + ("\n" + stderr if isinstance(stderr, str) and stderr.strip() else "")
        # Big outputs are spilled to <session dir>/tool-results/<id>.txt and only previewed here.
        spill = None
        candidates = []
        if isinstance(result, dict) and isinstance(result.get("persistedOutputPath"), str):
            candidates.append(result["persistedOutputPath"])
        if "tool-results" in output:
            candidates += _CLAUDE_SPILL_RE.findall(output)
        session_dir = os.path.splitext(path)[0]
        parts = os.path.normpath(path).split(os.sep)
        if "subagents" in parts:
            session_dir = os.sep.join(parts[:len(parts) - 1 - parts[::-1].index("subagents")])
        # The path was written on the machine that ran the session: when the folder was moved,
        # restored or synced, the same file name under this session's own folder is the spill.
        candidates += [os.path.join(session_dir, "tool-results", re.split(r"[/\\]", c)[-1]) for c in list(candidates)]
        if isinstance(call_id, str) and re.fullmatch(r"[A-Za-z0-9_-]+", call_id):
            candidates.append(os.path.join(session_dir, "tool-results", call_id + ".txt"))
        for c in candidates:
            c = os.path.expanduser(c)
            if "tool-results" in c and os.path.isfile(c):
                try:
                    spill = _read_head_tail(c)
                except OSError:
                    continue
                break
        output = spill if spill is not None else output
        # The CLI appends its reminders to what a tool returned (after every Read: "Whenever you read a
        # file, you should consider whether it would be considered malware..."): the same text in
        # every read, not what the tool said ("malware" matched every session that read a file).
        if "<system-reminder>" in output:
            output = _CLAUDE_TOOL_REMINDER_RE.sub("\n", output).strip("\n")
        return output

    @staticmethod
    def _attachment(rec, ts, entries):
        a = rec.get("attachment")
        if not isinstance(a, dict):
            return
        atype = a.get("type")
        if atype == "queued_command" and isinstance(a.get("prompt"), str) and a.get("commandMode", "prompt") == "prompt":
            # Typed by the human while the agent was working, delivered mid-turn.
            entries.add("user", a["prompt"], ts=ts, role="user")
        elif atype == "hook_additional_context" and isinstance(a.get("content"), str):
            entries.add("context", a["content"], ts=ts, role="hook")
        elif atype == "nested_memory" and isinstance(a.get("content"), dict):
            entries.add("context", str(a["content"].get("content") or ""), ts=ts, role="memory")

    def retention(self, env):
        """Claude Code deletes transcripts older than `cleanupPeriodDays` (settings.json; 30 by default)."""
        settings = os.path.join(agent_dir(env, "CLAUDE_CONFIG_DIR", ".claude"), "settings.json")
        days = (_read_json(settings) or {}).get("cleanupPeriodDays", 30)
        if not isinstance(days, (int, float)) or isinstance(days, bool):
            days = 30
        return {"days": days, "setting": "cleanupPeriodDays in %s" % settings}

    def resume_command(self, row):
        if not row.get("session_id") or row["session_id"].startswith("agent-"):
            return None  # sub-agents cannot be resumed on their own
        cmd = "%s --resume %s" % (self.command, shell_quote(row["session_id"]))
        # Claude Code looks sessions up under the project folder of the current directory, so the
        # command only works when run in the session's cwd.
        if row.get("cwd"):
            cmd = "cd %s && %s" % (shell_quote(row["cwd"]), cmd)
        return cmd


@register
class OhMyOpenCodeParser(ClaudeCodeParser):
    """oh-my-opencode's Claude-compatible transcripts: ~/.claude/transcripts/ses_<id>.jsonl.

    The OpenCode plugin's Claude Code hooks (src/hooks/claude-code-hooks) write, per OpenCode session
    (`ses_...`), one line per user prompt (`user`, `content`), tool call (`tool_use`, `tool_name`,
    `tool_input`) and result (`tool_result`: the same, plus `tool_output`), for Claude Code hooks to
    read; no assistant text, no working folder. These are the record types of Claude Code's own
    early transcripts, so Claude Code's reading serves (appends read from where the last read
    stopped); the session belongs to OpenCode, hence its own agent id and no `claude --resume`.
    """

    session_env = ()
    journal = running = None   # ~/.claude/history.jsonl and sessions/ name Claude Code's sessions, not these
    session_folders = False   # (flat)
    content_on_record = True
    id, label, version = "omo", "oh-my-opencode", 2
    verified = "its hooks' source and 3 real transcripts, 2026-11-25"

    def default_roots(self, env):
        # The plugin writes under the home folder's .claude (os.homedir()), whatever CLAUDE_CONFIG_DIR says.
        roots = [os.path.join(_home(env), ".claude", "transcripts")]
        return roots + [os.path.join(os.path.dirname(r), "transcripts") for r in super().default_roots(env)
                        if os.path.join(os.path.dirname(r), "transcripts") not in roots]

    def list_files(self, root):
        return walk_files(root, lambda n: n.startswith("ses_") and n.endswith(".jsonl"), max_depth=0)

    def start_mark(self, root):
        # Its hooks append to an old session's transcript in place, nothing else of ~/.claude changes
        # (oh-my-openagent's transcript.ts); OpenCode, which runs them, writes its database at every
        # message: for ~/.claude/transcripts, ~/.local/share/opencode/opencode.db (with its -wal).
        claude = os.path.dirname(root.rstrip(os.sep))
        db = os.path.join(os.path.dirname(claude), ".local", "share", "opencode", "opencode.db")
        return db if os.path.basename(claude) == ".claude" and os.path.isfile(db) else None

    def _folder_summaries(self, folder, recent=False):
        return {}, [], 0   # no summary records name these sessions

    def retention(self, env):
        return None

    def resume_command(self, row):
        return None   # OpenCode's, as for its own sessions (see OpenCodeParser)


# -------------------------------------------------------------------------------------------------
# Codex CLI (openai/codex, codex-rs/core rollout): ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl
# -------------------------------------------------------------------------------------------------

# User-role messages that Codex injects (environment, AGENTS.md, instructions...). They are either
# wholly wrapped in one snake_case tag or start with a known heading.
_CODEX_WRAPPED_RE = LazyPattern(r"^\s*<([a-z][a-z0-9_ -]*)>.*</\1>\s*$", re.S)
_CODEX_CONTEXT_PREFIXES = ("# AGENTS.md", "<environment_context>", "<user_instructions>", "<permissions instructions>",
                           "<INSTRUCTIONS>", "<system-reminder>", "<user_shell_command>", "<turn_aborted>")
# Lines written within this many seconds of a replayed parent session_meta belong to the burst that
# creates a forked thread (parent history, then the new thread's own initial context).
REPLAY_BURST_SECONDS = 2.0


def _no_time():
    """The time of a name without one of its own (older session_index lines): it loses to any dated one."""
    return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)


def _codex_is_context(text):
    t = text.lstrip()
    return t.startswith(_CODEX_CONTEXT_PREFIXES) or bool(_CODEX_WRAPPED_RE.match(t))


# Codex puts a header before a command's output: "Exit code: N\nWall time: 0.8 seconds\nOutput:\n..."
# (the shell tool), "Chunk ID: ...\nWall time: ...\nProcess exited with code N\nOriginal token count:
# ...\nOutput:\n..." (exec_command, 0.100+), "Wall time: ...\nOutput:\n" (an MCP call). The header is
# the harness's, in every output alike: its words ("token count", "wall time", "exit code") would
# match every session that ran a command. Only a failure is said, as Claude Code says it.
_CODEX_HEADER_LINE = LazyPattern(r"(?:Chunk ID|Wall time|Exit code|Original token count|Total output lines):[^\n]*"
                                 r"|Process (?:exited with code|running with session ID) -?\d+\s*")
_CODEX_EXIT_RE = LazyPattern(r"^(Process exited with code|Exit code:) (-?\d+)\s*$", re.M)


_CODEX_IMAGE_TAG = LazyPattern(r"\s*</?(?:local_)?image\b[^>\n]*>\s*\Z")


def _codex_output(output):
    """function_call_output.output -> (text, is_error). It is a string (older CLIs: a JSON string
    {"output", "metadata": {"exit_code"}}; exec_command: a header naming the exit code), {content,
    success}, or a list of content items."""
    if isinstance(output, str):
        if output.startswith("{"):
            try:
                obj = _json_decode(output)
            except BAD_JSON:
                return output, False
            if isinstance(obj, dict) and isinstance(obj.get("output"), str):
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                return obj["output"], bool(meta.get("exit_code"))
        at = output.find("\nOutput:")
        head = output[:at] if at >= 0 else output[:300]
        m = _CODEX_EXIT_RE.search(head)
        code = int(m.group(2)) if m else 0
        if 0 <= at < 600 and all(_CODEX_HEADER_LINE.fullmatch(line) for line in head.split("\n")):
            body = output[at + 8:]
            return ("Exit code %d\n" % code if code else "") + (body[1:] if body.startswith("\n") else body), code != 0
        # (not such a header: only the unified exec's own line is taken at its word)
        return output, bool(m and m.group(1).startswith("Process") and code != 0)
    if isinstance(output, dict):
        if "content" in output:
            text, _ = _codex_output(output.get("content"))
            return text, output.get("success") is False
        if isinstance(output.get("text"), str):
            return output["text"], False
        return "", False
    if isinstance(output, list):
        return text_of(output), False
    return "", False


_PATCH_FILE_RE = LazyPattern(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.M)


@register
class CodexParser(Parser):
    """Codex CLI rollouts, all three eras: TypeScript-era `rollout-*.json` ({session, items}), bare
    JSONL (a header line, then bare ResponseItems), and wrapped JSONL ({timestamp, type, payload}).

    Wrapped files say most things twice (`response_item` and `event_msg`); each text is indexed once,
    preferring the typed prompt (`user_message`) and the model's own items for the rest. Injected
    context (environment, AGENTS.md, developer/permission messages) is "context". Tool calls are
    joined to their outputs by call_id. Forked and sub-agent threads link to their parent, and the
    parent history they replay is left out. Names come from `session_index.jsonl` (thread names).

    JSONL rollouts are read in turns and resumable: a turn ends before a `turn_context`,
    `task_started` or prompt line once each typed prompt so far has its copy in the other stream
    (files that write prompts in one stream only are read whole); the two copies of a text are then
    always in one turn, so each turn picks its texts alone, and a read can stop and go on at a
    turn's start, carrying the session's id, folder, parent, name, times and what the file has
    shown (response tool calls, a replay). A turn still waiting for a tool's output does not end
    (PENDING_CALL_LINES bounds the wait), nor does a fork's replayed history before its creation
    burst is over. A .jsonl.zst is read whole.
    """

    session_env = ("CODEX_THREAD_ID",)  # set for the commands it runs (0.169); a thread is a session
    id, label, version = "codex", "Codex", 5
    resumable = True
    # $CODEX_HOME/history.jsonl: {session_id, ts (s), text} per prompt (codex-rs/core/src/
    # message_history.rs; `conversation_id` in some 0.2x releases). Trimmed from the front when it
    # outgrows history.max_bytes (a rewrite: read again from its tail).
    journal = ("history.jsonl", ("session_id", "conversation_id"))
    # ~/.codex/state_5.sqlite (0.16x): threads(id, rollout_path, cwd, updated_at_ms, ...), stamped at
    # every turn, also by `codex exec` and `codex exec resume ID`, which add nothing to history.jsonl
    # (0.169.0, checked with the real CLI).
    # (updated_at_ms came later than updated_at, in seconds: either serves.)
    updates = ("state_*.sqlite", "threads", "id", ("updated_at_ms", "updated_at"))
    # sessions/YYYY/MM/DD/rollout-<start time>-<id>.jsonl; `codex resume` and `codex exec resume`
    # append to the session's own file (codex-rs rollout/recorder.rs: RolloutRecorder::new opens
    # it to resume; checked with 0.169.0).
    dated_folders = True
    verified = "0.169.0 and 0.171.0, 2026-11-26"
    # Wrapped records, then the ResponseItems inside `response_item` (and the bare era's lines); the
    # release is session_meta's `cli_version` (see _meta). event_msg repeats the items (see _CodexState).
    records = ("session_meta", "response_item", "event_msg", "turn_context", "compacted",
               "message", "reasoning", "function_call", "custom_tool_call", "local_shell_call",
               "function_call_output", "custom_tool_call_output", "web_search_call", "agent_message",
               "tool_call", "tool_result")
    skipped_records = ("world_state", "inter_agent_communication", "inter_agent_communication_metadata",
                       "ghost_snapshot", "image_generation_call", "tool_search_call", "tool_search_output",
                       "compaction", "context_compaction", "token_usage_record")

    def __init__(self):
        self._title_cache = {}   # session_index.jsonl path -> (size, mtime_ns, {thread id: name})

    def default_roots(self, env):
        home = agent_dir(env, "CODEX_HOME", ".codex")
        return [os.path.join(home, "sessions"), os.path.join(home, "archived_sessions")]

    def list_files(self, root):
        def match(name):
            return name.startswith("rollout-") and name.endswith((".jsonl", ".json", ".jsonl.zst"))
        files = walk_files(root, match, max_depth=4)
        present = set(files)
        # The compression worker leaves the plain file in place until the .zst is complete: the plain
        # one wins when both exist.
        return [f for f in files if not (f.endswith(".zst") and f[:-4] in present)]

    # -- reading --------------------------------------------------------------------------------

    def parse(self, path, report, resume=None, limit=None):
        if path.endswith(".json"):
            return [self._parse_ts_json(path, report)]
        if resume is not None:
            return [self._parse_jsonl(path, report, None, resume, limit)]
        if not path.endswith(".zst"):
            head = first_json_line(path)
            if head is None:
                # The meta line can outgrow the peek (long base instructions and tool lists): then a
                # cheap look at its start decides, and reading the whole line is left to the loop.
                raw = read_head(path, 4096).lstrip(LINE_START)
                if not (raw.startswith(b"{") and b'"payload"' in raw):
                    raise NotASessionFile("first line is not JSON")
            elif not (isinstance(head.get("payload"), dict) and isinstance(head.get("type"), str)) and not (
                    "id" in head and "timestamp" in head and "type" not in head):
                raise NotASessionFile("neither a wrapped rollout line nor a bare rollout header")
            return [self._parse_jsonl(path, report, head, None, limit)]
        return [self._parse_jsonl(path, report, None)]

    def _new_session(self, path, session_id):
        if not session_id:
            m = _UUID_RE.search(os.path.basename(path))
            session_id = m.group(0) if m else os.path.basename(path).split(".")[0]
        return Session(self.id, str(session_id), path)

    def _parse_ts_json(self, path, report):
        """TypeScript CLI (Apr-May 2025): one JSON document rewritten in place."""
        with open_regular(path) as f:
            doc = load_json_document(f.read())
        if doc is None:
            raise NotASessionFile("not a JSON document")
        if not isinstance(doc, dict) or not isinstance(doc.get("session"), dict) or not isinstance(doc.get("items"), list):
            raise NotASessionFile("no {session, items} document")
        meta = doc["session"]
        s = self._new_session(path, meta.get("id"))
        s.cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
        st = _CodexState()
        if isinstance(meta.get("instructions"), str):
            st.entries.add("context", meta["instructions"], role="instructions")
        for item in doc["items"]:
            if isinstance(item, dict):
                st.response_item(item, None, report)
            else:
                report.skip("malformed item")
        return self._finish(s, st, path, norm_time(meta.get("timestamp")))

    def _parse_jsonl(self, path, report, head, resume=None, limit=None):
        """A JSONL rollout from its start or from a checkpoint (a turn's first line), in turns (see
        the class)."""
        start = resume["offset"] if resume else 0
        st = _CodexState.carried(resume["state"] if resume else None)
        s = created = None
        if resume:
            s = self._new_session(path, st.own_id)
            s.cwd, s.parent, created = st.cwd, st.parent, st.created
        records = iter_jsonl_any(path, report, start)
        if head is not None and head.get("type") == "session_meta":
            # Read the meta from the head too: a file holding only an unfinished meta line (no newline
            # yet) is still a session that exists.
            records = iter(records)
            next(records, None)
            records = itertools.chain([(None, head)], records)
        prev, line_no, checkpoint, complete = start, 0, None, True
        for offset, rec in records:
            line_no += 1
            ts = norm_time(rec.get("timestamp"))
            rtype = rec.get("type")
            payload = rec.get("payload")
            if s is not None and offset is not None and st.turn_starts(rec, line_no):
                self._close_turn(s, st)
                st = st.next_turn()
                st.cwd, st.parent, st.created = s.cwd, s.parent, created
                checkpoint = {"offset": prev, "seq": len(s.chunks), "state": st.state(s)}
                if limit and prev - start >= limit:
                    complete = False
                    break
            if offset is not None:
                prev = offset
            if s is None:
                if rtype == "session_meta" and isinstance(payload, dict):
                    s = self._new_session(path, payload.get("id"))
                    created = norm_time(payload.get("timestamp")) or ts
                    self._meta(s, payload, report)
                    st.own_id = s.session_id
                    continue
                if "id" in rec and "timestamp" in rec and "type" not in rec:   # bare era header
                    s = self._new_session(path, rec.get("id"))
                    created = norm_time(rec.get("timestamp"))
                    st.bare = True
                    st.own_id = s.session_id
                    continue
                if not isinstance(payload, dict):
                    raise NotASessionFile("no session_meta before the first item")
                s = self._new_session(path, None)   # wrapped file whose meta line is missing
                st.own_id = s.session_id
            if ts:
                st.timestamps.append(ts)
            if st.bare:
                if rec.get("record_type") == "state":
                    continue  # placeholder lines of the bare era
                if isinstance(rec.get("type"), str):
                    st.response_item(rec, None, report)
                continue
            if not isinstance(payload, dict):
                report.skip("record without payload")
                continue
            if rtype == "response_item":   # (the two types of most lines first; record_type counts the rest)
                st.response_item(payload, ts, report, line_ts=rec.get("timestamp"))
            elif rtype == "event_msg":
                st.event(payload, ts)
            elif self.record_type(report, rec) == "session_meta":
                st.foreign_meta(payload, rec.get("timestamp"))
            elif rtype == "turn_context":
                # A thread resumed from another folder goes on there: Codex writes that folder in the
                # context of the turns after, and moves the thread to it in its state store (0.169).
                # The session's folder is its latest turn's, as in Codex's own list (a parent's
                # history replayed in a fork's creation burst does not count).
                if _is_abs_path(payload.get("cwd")) and (s.cwd is None or not st.in_replay(rec.get("timestamp"))):
                    s.cwd = payload["cwd"]
            elif rtype == "compacted":
                # The summary the model wrote; replacement_history replays earlier items (not indexed).
                if isinstance(payload.get("message"), str):
                    st.entries.add("summary", payload["message"], ts=ts, role="compaction")
            # world_state (AGENTS.md/env snapshots), inter_agent_communication_metadata: no new text
        if s is None:
            raise NotASessionFile("empty file")
        if checkpoint is not None:
            checkpoint["seq"] += resume["seq"] if resume else 0
            s.checkpoint = checkpoint
        s.complete = complete
        return self._finish(s, st, path, created)

    @staticmethod
    def _meta(s, meta, report=None):
        if report is not None:
            report.saw_version(meta.get("cli_version"))
        if _is_abs_path(meta.get("cwd")):
            s.cwd = meta["cwd"]
        source = meta.get("source")
        spawn = source.get("subagent") if isinstance(source, dict) else None
        spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
        parent = meta.get("parent_thread_id") or (spawn or {}).get("parent_thread_id") or meta.get("forked_from_id")
        s.parent = parent if isinstance(parent, str) and parent else None

    @staticmethod
    def _close_turn(s, st):
        """The chunks of a turn, once its texts are picked (see _CodexState.resolve)."""
        st.resolve()
        st.entries.into(s)
        for ts in st.span + [min(st.timestamps, default=None), max(st.timestamps, default=None)]:
            s.touch(ts)

    def _finish(self, s, st, path, created):
        self._close_turn(s, st)
        if s.cwd is None:
            s.cwd = st.env_cwd
        s.name = self._thread_name(path, s.session_id) or st.thread_name
        s.touch(created)
        if s.modified is None or (st.bare or path.endswith(".json")):
            # Bare and TS-era files have no per-line timestamps: the file's mtime is the last activity.
            s.touch(file_mtime_iso(path))
        return s

    def _thread_name(self, path, session_id):
        """The newest name Codex keeps outside the rollout: `session_index.jsonl` (append-only, last
        entry per id wins; written by /rename) or the `threads` table of `state_N.sqlite` (`name`,
        set by the same rename, and `title`, which the desktop app changes). A rename does not touch
        the rollout itself."""
        home = self._codex_home(path)
        if home is None:
            return None
        found = [c for c in (self._index_names(home).get(session_id), self._state_names(home).get(session_id)) if c]
        return max(found, key=lambda c: c[0])[1] if found else None

    @staticmethod
    def _codex_home(path):
        d = os.path.dirname(os.path.abspath(path))
        home = None
        for _ in range(6):
            if os.path.basename(d) in ("sessions", "archived_sessions"):
                home = os.path.dirname(d)
                break
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        return home

    def _cached(self, path, read, *also):
        """read(path) once per change of path (and of the files in `also`, e.g. its -wal)."""
        try:
            st = os.stat(path)
        except OSError:
            return {}
        key = [(st.st_size, st.st_mtime_ns)]
        for f in also:
            try:
                key.append((os.stat(f).st_size, os.stat(f).st_mtime_ns))
            except OSError:
                key.append(None)
        cached = self._title_cache.get(path)
        if not cached or cached[0] != key:
            cached = self._title_cache[path] = (key, read(path))
        return cached[1]

    def _index_names(self, home):
        """{thread id: (updated_at, name)} from session_index.jsonl."""
        def read(index):
            names = {}
            for _, rec in iter_jsonl(index, ParseReport()):
                if isinstance(rec.get("id"), str) and isinstance(rec.get("thread_name"), str):
                    name = rec["thread_name"].strip()
                    names[rec["id"]] = (parse_time(rec.get("updated_at")) or _no_time(), name) if name else None
            return names
        return self._cached(os.path.join(home, "session_index.jsonl"), read)

    def _state_names(self, home):
        """{thread id: (updated_at, name)} from the newest state_N.sqlite: the rename (`name`), else a
        `title` unless it merely repeats the first prompt (Codex's default title)."""
        dbs = [f for f in os.listdir(home) if re.fullmatch(r"state_\d+\.sqlite", f)] if os.path.isdir(home) else []
        if not dbs:
            return {}
        db = os.path.join(home, max(dbs, key=lambda f: int(re.sub(r"\D", "", f))))

        def read(db):
            try:
                con = open_agent_db(db, attempts=2)
            except (OSError, NotASessionFile):
                return {}
            names = {}
            try:
                cols = set(_db_columns(con, "threads"))
                if not {"id", "title"} <= cols:
                    return {}
                pick = _pick(cols, ("name", "first_user_message", "updated_at_ms", "updated_at"))
                for tid, title, name, first, ms, secs in con.execute("SELECT id, title, %s FROM threads" % pick):
                    name = name.strip() if isinstance(name, str) else ""
                    title = title.strip() if isinstance(title, str) else ""
                    if not name and title and _text_key(title) != _text_key(first if isinstance(first, str) else ""):
                        name = title
                    if name and isinstance(tid, str):
                        names[tid] = (parse_time(ms or secs) or _no_time(), name)
            except sqlite3.DatabaseError:
                return names
            finally:
                con.close()
            return names
        return self._cached(db, read, db + "-wal")

    def resume_command(self, row):
        return "codex resume %s" % shell_quote(row["session_id"]) if row.get("session_id") else None


class _CodexState:
    """What a Codex file says while it is read: entries tagged with the stream they came from, so
    that the text said twice (response_item and event_msg, or item_completed) is kept once."""

    # Stream preference per kind of text; a lower-ranked stream only adds texts the others lack.
    PREFERENCE = {"user": ("event", "item", "response"), "assistant": ("response", "event", "item"),
                  "thinking": ("response", "event", "item")}
    # The texts compared for each kind: a prompt one stream calls injected context is still the prompt.
    COMPARED = {"user": "user", "context": "user", "assistant": "assistant", "thinking": "thinking"}

    # Carried from turn to turn, and in a checkpoint's state (the rest belongs to one turn).
    CARRIED = ("own_id", "bare", "env_cwd", "thread_name", "has_response_tools", "replayed", "cwd", "parent",
               "created", "span", "two_streams")

    def __init__(self):
        self.entries = _Entries()
        self.own_id = None
        self.bare = False
        self.env_cwd = None
        self.thread_name = None
        self.timestamps = []
        self.has_response_tools = False
        self.replay = None   # {"start": index, "end": index or None, "ts": datetime} after a parent meta
        self.replayed = False   # a parent's history was replayed (only the first is)
        self.tool_calls = {}   # call id -> response_item tool entry
        self.exit_codes = {}   # call id -> exit code, from exec_command_end and item_completed events
        self.cwd = self.parent = self.created = None
        self.span = []   # the first and last times of the turns before
        self.waiting_since = None   # line number from which a tool call has waited for its output
        self.unpaired = []   # (text key, stream) of the typed prompts still without their copy
        self.unpaired_gone = 0   # how many were dropped from its start (see _pair)
        self.unpaired_at = {}    # text key -> stream -> places in unpaired (counted with those dropped)
        self.two_streams = False   # the file writes its prompts in both streams (event_msg too)

    @classmethod
    def carried(cls, state):
        st = cls()
        for k, v in (state or {}).items():
            if k in cls.CARRIED:
                setattr(st, k, v)
        return st

    def next_turn(self):
        return self.carried(self.state(None))

    def state(self, s):
        """What the next turn needs of this one and the turns before (JSON)."""
        times = [t for t in self.span + [min(self.timestamps, default=None), max(self.timestamps, default=None)] if t]
        out = {k: getattr(self, k) for k in self.CARRIED}
        out["span"] = [min(times), max(times)] if times else []
        out["replayed"] = self.replayed or self.replay is not None
        if s is not None:
            out["cwd"], out["parent"] = s.cwd, s.parent
        return out

    def turn_starts(self, rec, line_no):
        """Whether a turn can end before this line: it starts a turn or a prompt, each typed prompt
        so far has its copy, no tool call waits for its output, and a replayed history is over."""
        entries = self.entries
        if entries.calls or entries.unnamed_calls:
            if self.waiting_since is None:
                self.waiting_since = line_no
            if line_no - self.waiting_since <= PENDING_CALL_LINES:
                return False
            entries.calls.clear()   # a call whose output never came: kept without it
            entries.unnamed_calls.clear()
        self.waiting_since = None
        if self.in_replay(rec.get("timestamp")):
            return False
        if self.bare:
            return True
        rtype, p = rec.get("type"), rec.get("payload")
        p = p if isinstance(p, dict) else {}
        if not (rtype == "turn_context" or (rtype == "event_msg" and p.get("type") in ("task_started", "user_message"))
                or (rtype == "response_item" and p.get("type") == "message" and p.get("role") == "user")):
            return False
        # Each typed prompt so far has its copy (see _say): the copies of one prompt are written
        # together but in no fixed order around turn_context and task_started (Codex 0.16x writes
        # the user_message event before task_started and the response item after it). A file that
        # writes its prompts in one stream only (no event_msg prompt so far: generated or trimmed
        # rollouts) has no copies to wait for: a new prompt item starts a turn. (An event line there
        # may be the first copy still to come, so it is not taken as a start.)
        return not self.unpaired or (not self.two_streams and rtype == "response_item")

    # -- streams --------------------------------------------------------------------------------

    def _say(self, kind, text, ts, stream, role):
        if isinstance(text, str) and text.strip():
            # Copies are compared without any whitespace: a prompt sent in several text parts is
            # one text in the event stream, their concatenation (see _typed).
            key = "".join(text.split())
            self.entries.add(kind, text, ts=ts, role=role, stream=stream, key=key)
            if kind == "user":
                self.two_streams = self.two_streams or stream == "event"
                self._pair(key, stream)

    def _pair(self, key, stream):
        """A prompt is paired with its earliest unpaired copy from another stream; the prompts before
        that one will get no copy any more (Codex writes a prompt's copies before the next). Else it
        waits for its copy. The copies are found by text and stream (unpaired_at), not by a look
        through all the prompts waiting: a file of 20,000 prompts in one stream took 17 s to read."""
        gone, twin = self.unpaired_gone, None
        by_stream = self.unpaired_at.setdefault(key, {})
        for st, places in by_stream.items():
            if st != stream:
                while places and places[0] < gone:
                    places.popleft()   # (dropped with the prompts before a pair)
                if places and (twin is None or places[0] < twin):
                    twin = places[0]
        if twin is None:
            by_stream.setdefault(stream, collections.deque()).append(gone + len(self.unpaired))
            self.unpaired.append((key, stream))
        else:
            del self.unpaired[:twin - gone + 1]
            self.unpaired_gone = twin + 1

    def _typed(self, parts, ts, stream):
        """The text parts of one prompt: one user text. A client may send a prompt in several parts
        (a harness's project notes, then what was typed); the event stream writes their
        concatenation, which then pairs with this one instead of adding every part a second time.
        The tags around an attached image ("<image name=[Image #1]>", "</image>") are not text the
        event stream keeps (codex-rs event_mapping.rs parse_user_message), nor words anyone types."""
        parts = [t for t in parts if not _CODEX_IMAGE_TAG.match(t)]
        if parts:
            self._say("user", "\n".join(parts) if len(parts) > 1 else parts[0], ts, stream, "user")

    def foreign_meta(self, meta, line_ts):
        """A second session_meta: a fork or sub-agent replays its parent's history after it."""
        if meta.get("id") == self.own_id:
            return
        if self.replay is None and not self.replayed:
            self.replay = {"start": len(self.entries.items), "end": None, "ts": parse_time(line_ts)}

    def in_replay(self, line_ts):
        """Whether a line written at line_ts belongs to the burst that replays a parent's history."""
        if self.replay is None:
            return False
        t, t0 = parse_time(line_ts), self.replay["ts"]
        return t is None or t0 is None or (t - t0).total_seconds() <= REPLAY_BURST_SECONDS

    def _initial_context_seen(self, line_ts):
        # The new thread writes its own initial context (developer + environment messages) right
        # after the replayed parent items: the last such message in the creation burst ends the replay.
        if self.in_replay(line_ts):
            self.replay["end"] = len(self.entries.items)

    def response_item(self, p, ts, report, line_ts=None):
        ptype = CodexParser.record_type(report, p, family="response_item ")
        if ptype == "message":
            role = p.get("role")
            content = p.get("content")
            parts = [content] if isinstance(content, str) else [
                b.get("text") for b in content if isinstance(b, dict) and b.get("type") in ("input_text", "output_text", "text")
                and isinstance(b.get("text"), str)] if isinstance(content, list) else []
            if role in ("developer", "system"):
                self._initial_context_seen(line_ts)
                # What Codex composes for the model at each start: permissions, the skills list (33 KB),
                # collaboration mode, apps, plugins... up to 40 KB a session, the same in every one. Not
                # indexed: its words matched every Codex session, and its length (BM25 divides by a
                # document's) ranked a Codex session below another agent's saying the same.
                if role == "system":
                    for t in parts:
                        self._say("context", t, ts, "response", role)
            elif role == "user":
                if parts and all(_codex_is_context(t) for t in parts):
                    self._initial_context_seen(line_ts)
                for t in parts:
                    if _codex_is_context(t):
                        self._say("context", t, ts, "response", "context")
                        m = re.search(r"<cwd>(.*?)</cwd>", t, re.S)
                        if m and self.env_cwd is None:
                            self.env_cwd = m.group(1).strip()
                self._typed([t for t in parts if not _codex_is_context(t)], ts, "response")
            elif role == "assistant":
                text = "\n".join(t for t in parts if t.strip())
                self._say("assistant", text, ts, "response", "assistant")
        elif ptype == "reasoning":
            texts = [b.get("text") for key in ("summary", "content") if isinstance(p.get(key), list)
                     for b in p[key] if isinstance(b, dict) and isinstance(b.get("text"), str)]
            for t in texts:   # one entry per part: event_msg/agent_reasoning repeats them one by one
                self._say("thinking", t, ts, "response", "assistant")
        elif ptype in ("function_call", "custom_tool_call", "local_shell_call"):
            self.has_response_tools = True
            if ptype == "function_call":
                args = p.get("arguments")
                if isinstance(args, str):
                    try:
                        args = _json_decode(args) if args.strip() else None
                    except BAD_JSON:
                        pass
            elif ptype == "custom_tool_call":
                args = p.get("input")   # raw text (an apply_patch patch), sometimes JSON
                if isinstance(args, str) and args.startswith("{"):
                    try:
                        args = _json_decode(args)
                    except BAD_JSON:
                        pass
            else:
                action = p.get("action") if isinstance(p.get("action"), dict) else {}
                args = {"command": action.get("command"), "workdir": action.get("working_directory")}
            if isinstance(args, dict) and "command" in args:
                args = dict(args, command=_command_string(args["command"]))
            name = p.get("name") or ("shell" if ptype == "local_shell_call" else "tool")
            if isinstance(p.get("namespace"), str) and p["namespace"] and isinstance(name, str):
                # An MCP server's tool (0.169): {"namespace": "mcp__sesame", "name": "search"}, named
                # as the other agents name it, mcp__sesame__search (see _OWN_TOOL)
                name = "%s__%s" % (p["namespace"], name)
            path = None
            if isinstance(args, str):
                m = _PATCH_FILE_RE.search(args)
                path = m.group(1).strip() if m else None
            call_id = _id_key(p.get("call_id") or p.get("id"))
            e = self.entries.tool(name, args, ts=ts, call_id=call_id, path=path)
            if call_id:
                self.tool_calls[call_id] = e
        elif ptype in ("function_call_output", "custom_tool_call_output"):
            text, is_error = _codex_output(p.get("output"))
            self.entries.result(p.get("call_id"), text, is_error, ts=ts)
        elif ptype == "web_search_call":
            self.has_response_tools = True
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            self.entries.tool("web_search", {"query": action.get("query"), "url": action.get("url")}, ts=ts,
                              call_id=p.get("call_id") or p.get("id"))
        elif ptype == "agent_message":
            # Messages between agents (multi-agent v2): said by an agent, not by the human.
            self._say("custom", text_of(p.get("content")), ts, "response", "agent")
        elif ptype == "tool_call":
            # Shape seen only in third-party fixtures; cheap to accept.
            fn = p.get("function") if isinstance(p.get("function"), dict) else {}
            self.entries.tool(fn.get("name") or p.get("name"), p.get("arguments"), ts=ts, call_id=p.get("call_id"))
        elif ptype == "tool_result":
            result = p.get("result")
            if isinstance(result, dict):
                result = "\n".join(str(result[k]) for k in ("stdout", "stderr", "output") if result.get(k))
            self.entries.result(p.get("call_id"), str(result or ""), ts=ts, name=p.get("name"))
        # ghost_snapshot, image_generation_call, tool_search_*, compaction: nothing to search

    def event(self, p, ts):
        etype = p.get("type")
        if etype == "user_message":
            text = p.get("message")
            if isinstance(text, str):
                kind = p.get("kind")
                if kind in ("user_instructions", "environment_context") or _codex_is_context(text):
                    self._say("context", text, ts, "event", "context")
                else:
                    self._say("user", text, ts, "event", "user")
        elif etype == "agent_message":
            self._say("assistant", p.get("message"), ts, "event", "assistant")
        elif etype in ("agent_reasoning", "agent_reasoning_raw_content"):
            self._say("thinking", p.get("text"), ts, "event", "assistant")
        elif etype == "thread_name_updated":
            if isinstance(p.get("thread_name"), str) and p["thread_name"].strip():
                self.thread_name = p["thread_name"].strip()
        elif etype == "item_completed" and isinstance(p.get("item"), dict):
            self._item(p["item"], ts)
        elif etype == "exec_command_end" and isinstance(p.get("exit_code"), int):
            self.exit_codes[_id_key(p.get("call_id"))] = p["exit_code"]
        # token_count, task_*, patch_apply_end, ... repeat what response_items say

    def _item(self, item, ts):
        """A TurnItem (history_mode "paginated" writes everything this way)."""
        itype = item.get("type")
        texts = [b.get("text") for b in _list(item.get("content")) if isinstance(b, dict) and isinstance(b.get("text"), str)] \
            if isinstance(item.get("content"), list) else []
        if itype == "UserMessage":
            for t in texts:
                if _codex_is_context(t):
                    self._say("context", t, ts, "item", "user")
            self._typed([t for t in texts if not _codex_is_context(t)], ts, "item")
        elif itype == "AgentMessage":
            self._say("assistant", "\n".join(texts), ts, "item", "assistant")
        elif itype == "Reasoning":
            for key in ("summary_text", "raw_content"):
                for t in item.get(key) or []:
                    self._say("thinking", t if isinstance(t, str) else None, ts, "item", "assistant")
        elif itype == "CommandExecution":
            output = "\n".join(str(item[k]) for k in ("aggregated_output", "stdout", "stderr") if item.get(k))
            e = self.entries.tool("shell", {"command": _command_string(item.get("command")), "cwd": item.get("cwd")},
                                  ts=ts, stream="item")
            e["output"] = output or None
            code = item.get("exit_code")
            e["is_error"] = item.get("status") == "failed" or (isinstance(code, int) and code != 0)
            if isinstance(code, int):
                self.exit_codes[_id_key(item.get("id"))] = code   # the id is the call_id of its function_call
        elif itype == "McpToolCall":
            result = item.get("result") if isinstance(item.get("result"), dict) else {}
            e = self.entries.tool("%s.%s" % (item.get("server"), item.get("tool")), item.get("arguments"), ts=ts,
                                  stream="item")
            e["output"] = text_of(result.get("content")) or None
            e["is_error"] = bool(result.get("isError"))

    # -- the end of the file: pick one text of each pair, drop replayed parent history ------------

    def resolve(self):
        items = self.entries.items
        if self.replay and self.replay["end"] is not None:
            for e in items[self.replay["start"]:self.replay["end"]]:
                e["drop"] = True
        said = collections.defaultdict(list)   # (kind, stream) -> its texts; context goes with user
        for e in items:
            kind = self.COMPARED.get(e["kind"])
            if kind and not e.get("drop"):
                said[(kind, e.get("stream"))].append(e)
        for kind, order in self.PREFERENCE.items():
            streams = [said[(kind, stream)] for stream in order if (kind, stream) in said]
            if len(streams) < 2:
                continue   # said in one stream only: nothing is a copy (most turns; no counting)
            kept = {}
            for mine in streams:
                seen = dict(kept)
                for e in mine:
                    if seen.get(e["key"], 0) > 0:
                        seen[e["key"]] -= 1
                        e["drop"] = True
                for e in mine:
                    if not e.get("drop"):
                        kept[e["key"]] = kept.get(e["key"], 0) + 1
        # The exit code of a command lives in the events; the call that ran it failed when it is not 0.
        for call_id, code in self.exit_codes.items():
            if code != 0 and call_id in self.tool_calls:
                self.tool_calls[call_id]["is_error"] = True
        # Tool items of item_completed only when the file has had no response_item tool calls so far.
        if self.has_response_tools:
            for e in items:
                if e["kind"] == "tool" and e.get("stream") == "item":
                    e["drop"] = True


# -------------------------------------------------------------------------------------------------
# OpenCode (sst/opencode): ~/.local/share/opencode/opencode.db and storage/
# -------------------------------------------------------------------------------------------------

# Every session gets a placeholder title until a small model names it after the first turn; the
# placeholder says nothing about the session, so it is not a name.
_OPENCODE_PLACEHOLDER_TITLE = LazyPattern(r"^(New [Ss]ession|Child session) - \d{4}-\d{2}-\d{2}T[\d:.]+Z?$")
# Folders of the data dir and of storage/ that never hold session files: skipped while walking
# (part/ and message/ alone can hold hundreds of thousands of files; snapshot/ holds git repos).
_OPENCODE_SKIP_DIRS = ("message", "part", "snapshot", "session_diff", "project", "todo", "log", "bin",
                       "tool-output", "share", "session_share", "node_modules", ".git", "worktree")


# The read tool's result wraps the file's numbered lines: "<file>\n00001| ...\n\n(End of file - total
# 178 lines)\n</file>" (1.x), "<path>P</path>\n<type>file</type>\n<content>\n1: ...\n\n(End of file -
# total 27 lines)\n</content>" (later). The wrapper and its status line are the same words in every
# read (the path is the call's own argument): the lines are kept, their numbers left out (tool_text).
_OPENCODE_READ_RE = LazyPattern(
    r"<(?:file|path>[^\n]*</path>\n<type>\w+</type>\n<content)>\n(.*?)(?:\n*\((?:End of file|File has more lines|"
    r"Showing lines|Output capped)[^\n]*\))?\n*</(?:file|content)>\s*\Z", re.S)


@register
class OpenCodeParser(Parser):
    """OpenCode sessions, in either of the two stores OpenCode has used.

    v1.2+ keeps everything in one SQLite database (`opencode.db`, or `opencode-<channel>.db`):
    tables session / message / part, whose `data` columns are the MessageV2 JSON. One database
    file gives many sessions. Up to v1.1 the same records were JSON files under `storage/`:
    session/<projectID>/<sessionID>.json, message/<sessionID>/<messageID>.json and
    part/<messageID>/<partID>.json; the session file is the one listed, and parsing it pulls in
    its messages and parts. The migration to SQLite leaves the JSON behind, so one session can be
    found in both stores: both copies carry OpenCode's own session id, and the index keeps one.
    """

    id, label, version = "opencode", "OpenCode", 2
    verified = "1.18.33, 2026-11-26"
    records = ("user", "assistant")   # message roles; a message's parts are its blocks
    blocks = ("text", "reasoning", "tool", "tool-invocation", "subtask")
    # attachments (never indexed: may be images), bookkeeping, diffs
    skipped_blocks = ("file", "step-start", "step-finish", "snapshot", "patch", "agent", "compaction", "retry")

    def default_roots(self, env):
        data = os.path.join(xdg_data(env), "opencode")
        roots = [data]
        db = env.get("OPENCODE_DB")   # absolute, or relative to the data dir (listed once either way)
        if db:
            roots.append(os.path.join(data, expand_home(env, db)))
        return roots

    def list_files(self, root):
        if os.path.isfile(root):   # a configured file (e.g. OPENCODE_DB) is taken as it is
            return [root] if root.endswith(".db") or self._is_session_json(root) else []
        found = walk_files(root, lambda n: n.endswith(".json") or n.endswith(".db"), max_depth=5,
                           skip_dirs=_OPENCODE_SKIP_DIRS)
        return [p for p in found if self._is_session_json(p)
                or (p.endswith(".db") and os.path.basename(p).startswith("opencode"))]

    @staticmethod
    def _is_session_json(path):
        # storage/session/<projectID>/<sessionID>.json (very old versions: session/info/<id>.json)
        return path.endswith(".json") and os.path.basename(os.path.dirname(os.path.dirname(path))) == "session"

    def parse(self, path, report):
        if path.endswith(".db"):
            return self.parse_sessions(path, report)
        return [self._parse_storage_session(path, report)]

    # -- SQLite store ------------------------------------------------------------------------------

    def session_marks(self, path):
        if not path.endswith(".db"):
            return None   # a session of the JSON tree: one file each already
        with AgentStore(path) as con:
            if not {"session", "message", "part"} <= _table_names(con) or not {"id", "title", "time_updated"} <= set(
                    _db_columns(con, "session")):
                return None
            # A part streams in place (its text grows, time_updated moves) and a revert deletes rows:
            # counts and newest times of messages and parts, per session (grouped: one pass each).
            marks = {sid: [updated, title] for sid, updated, title in con.execute(
                "SELECT id, time_updated, title FROM session")}
            for table in ("message", "part"):
                for sid, n, newest in con.execute("SELECT session_id, count(*), max(time_updated) FROM %s "
                                                  "GROUP BY session_id" % table):
                    if sid in marks:
                        marks[sid] += [table, n, newest]
            return marks

    def parse_sessions(self, path, report, only=None):   # (only=None: the whole store, for parse)
        con = open_agent_db(path)
        try:
            if not {"session", "message", "part"} <= _table_names(con):
                raise NotASessionFile("unknown schema: no session/message/part tables")
            cols = {row[1] for row in con.execute("PRAGMA table_info(session)")}
            if not {"id", "directory", "title", "time_created", "time_updated"} <= cols:
                raise NotASessionFile("unknown schema: session table lacks expected columns")
            parent = "parent_id" if "parent_id" in cols else "NULL"
            version = "version" if "version" in cols else "NULL"   # the release that wrote the session
            rows = con.execute("SELECT id, %s, directory, title, time_created, time_updated, %s FROM session "
                               "ORDER BY time_created, id" % (parent, version)).fetchall()
            sessions = []
            for sid, parent_id, directory, title, created, updated, release in rows:
                if only is not None and sid not in only:
                    continue
                messages = []
                for mid, data in con.execute("SELECT id, data FROM message WHERE session_id=? "
                                             "ORDER BY time_created, id", (sid,)):
                    info = _json_value(data)
                    if not isinstance(info, dict):
                        report.skip("malformed message row")
                        continue
                    messages.append((mid, info, []))
                parts = {}
                for mid, data in con.execute("SELECT message_id, data FROM part WHERE session_id=? "
                                             "ORDER BY message_id, id", (sid,)):
                    part = _json_value(data)
                    if isinstance(part, dict):
                        parts.setdefault(mid, []).append(part)
                    else:
                        report.skip("malformed part row")
                messages = [(mid, info, parts.get(mid, [])) for mid, info, _ in messages]
                s = Session(self.id, sid, path)
                self._fill(s, {"directory": directory, "title": title, "parentID": parent_id, "version": release,
                               "time": {"created": created, "updated": updated}}, messages, report)
                sessions.append(s)
            return sessions
        finally:
            con.close()

    # -- JSON storage tree ---------------------------------------------------------------------------

    def _parse_storage_session(self, path, report):
        # The indexer re-reads a file when its size or mtime changes. OpenCode rewrites the session
        # file whenever the session's time.updated moves (every message), so a changed message or
        # part file is picked up when the session file's mtime changes with it.
        info = _load_json_file(path)
        # Message and part files also have an id and times; a session has no role, type or messageID.
        if not isinstance(info, dict) or not isinstance(info.get("id"), str) or \
                any(k in info for k in ("role", "type", "messageID")) or \
                not any(k in info for k in ("directory", "projectID", "title")):
            raise NotASessionFile("no OpenCode session record")
        sid = info["id"]
        storage = os.path.dirname(os.path.dirname(os.path.dirname(path)))
        messages = []
        for folder in (os.path.join(storage, "message", sid), os.path.join(storage, "session", "message", sid)):
            for mpath in walk_files(folder, lambda n: n.endswith(".json"), max_depth=0):
                m = _load_json_file(mpath)
                if not isinstance(m, dict):
                    report.skip("malformed message file")
                    continue
                mid = m.get("id") if isinstance(m.get("id"), str) else os.path.basename(mpath)[:-5]
                messages.append((mid, m))
        messages.sort(key=lambda e: (self._created_ms(e[1]), e[0]))
        flat = None   # part/<partID>.json files that name their message (older layout), read once if needed
        full = []
        for mid, m in messages:
            parts = []
            for folder in (os.path.join(storage, "part", mid), os.path.join(storage, "session", "part", sid, mid)):
                for ppath in walk_files(folder, lambda n: n.endswith(".json"), max_depth=0):
                    p = _load_json_file(ppath)
                    if isinstance(p, dict):
                        parts.append(p)
                    else:
                        report.skip("malformed part file")
            if not parts and isinstance(m.get("parts"), list):   # very old: parts inline in the message
                parts = [p for p in m["parts"] if isinstance(p, dict)]
            if not parts:
                if flat is None:
                    flat = self._flat_parts(os.path.join(storage, "part"), report)
                parts = flat.get(mid, [])
            parts.sort(key=lambda p: str(p.get("id") or ""))
            full.append((mid, m, parts))
        s = Session(self.id, sid, path)
        self._fill(s, info, full, report)
        return s

    @staticmethod
    def _flat_parts(folder, report):
        by_message = {}
        try:
            entries = [e.path for e in os.scandir(folder) if e.name.endswith(".json") and e.is_file()]
        except OSError:
            return by_message
        for ppath in sorted(entries):
            p = _load_json_file(ppath)
            if isinstance(p, dict) and isinstance(p.get("messageID"), str):
                by_message.setdefault(p["messageID"], []).append(p)
            else:
                report.skip("malformed part file")
        return by_message

    @staticmethod
    def _created_ms(m):
        t = m.get("time")
        if isinstance(t, dict) and isinstance(t.get("created"), (int, float)):
            return t["created"]
        meta = m.get("metadata")   # very old messages keep their time under metadata
        if isinstance(meta, dict) and isinstance(meta.get("time"), dict):
            c = meta["time"].get("created")
            if isinstance(c, (int, float)):
                return c
        return 0

    # -- shared: session record + messages -> chunks ---------------------------------------------------

    def _fill(self, s, info, messages, report):
        s.cwd = info.get("directory") if isinstance(info.get("directory"), str) and info.get("directory") else None
        title = info.get("title")
        if isinstance(title, str) and title.strip() and not _OPENCODE_PLACEHOLDER_TITLE.match(title.strip()):
            s.name = title.strip()
        parent = info.get("parentID")   # sub-agent (task tool) sessions are child sessions
        s.parent = parent if isinstance(parent, str) and parent else None
        t = info.get("time") if isinstance(info.get("time"), dict) else {}
        s.created, s.modified = norm_time(t.get("created")), norm_time(t.get("updated"))
        report.saw_version(info.get("version"))
        for mid, m, parts in messages:
            role = self.record_type(report, m, key="role", family="role ")
            ts = norm_time(self._created_ms(m) or None)
            s.touch(ts)
            if s.cwd is None and isinstance(m.get("path"), dict) and isinstance(m["path"].get("cwd"), str):
                s.cwd = m["path"]["cwd"]
            if role not in ("user", "assistant"):
                continue
            # Compaction writes the summary as an assistant message flagged summary: true.
            is_summary = role == "assistant" and m.get("summary") is True
            for p in parts:
                self._part(s, role, is_summary, p, ts, report)
        _finish_times(s, s.path)

    @classmethod
    def _part(cls, s, role, is_summary, p, ts, report):
        ptype = cls.block_type(report, p)
        if ptype == "text":
            text = p.get("text") if isinstance(p.get("text"), str) else ""
            if p.get("synthetic") or p.get("ignored"):
                # Written by OpenCode, not typed: file contents of @mentions, "continue" nudges.
                s.add("context", text, role=role, ts=ts)
            elif is_summary:
                s.add("summary", text, role=role, ts=ts)
            else:
                s.add("user" if role == "user" else "assistant", text, role=role, ts=ts)
        elif ptype == "reasoning":
            s.add("thinking", p.get("text") if isinstance(p.get("text"), str) else "", role=role, ts=ts)
        elif ptype == "tool":
            name = str(p.get("tool") or "tool")
            state = p.get("state") if isinstance(p.get("state"), dict) else {}
            meta = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
            args = state.get("input")
            # A failed bash command is still "completed": its exit code is in the metadata.
            exit_code = meta.get("exit")
            is_error = state.get("status") == "error" or (
                isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0)
            output = state.get("error") if state.get("status") == "error" else state.get("output")
            if output is not None and not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            if meta.get("truncated") and isinstance(meta.get("outputPath"), str):
                output = OpenCodeParser._full_output(s.path, meta["outputPath"]) or output
            if name == "read" and isinstance(output, str):
                m = _OPENCODE_READ_RE.match(output)
                output = m.group(1) if m else output
            s.add("tool", tool_text(name, args, output, is_error), role=role, tool=name,
                  path=tool_path(args), ts=ts)
        elif ptype == "tool-invocation":   # very old AI-SDK style part
            inv = p.get("toolInvocation") if isinstance(p.get("toolInvocation"), dict) else {}
            name, args, output = str(inv.get("toolName") or "tool"), inv.get("args"), inv.get("result")
            if output is not None and not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            s.add("tool", tool_text(name, args, output), role=role, tool=name, path=tool_path(args), ts=ts)
        elif ptype == "subtask":   # a sub-agent launched from a command: its prompt is injected
            s.add("context", "\n".join(str(p.get(k)) for k in ("description", "prompt") if p.get(k)), role=role, ts=ts)

    @staticmethod
    def _full_output(store_path, output_path):
        """A long tool output: OpenCode keeps its head and tail in the part (with "...output
        truncated...") and the whole of it in <data dir>/tool-output/<id>. Looked for where the part
        says, else in the tool-output folder beside the store (a data dir moved or synced)."""
        base = re.split(r"[/\\]", output_path)[-1]
        candidates = [os.path.expanduser(output_path)]
        d = os.path.dirname(os.path.abspath(store_path))
        for _ in range(4):   # opencode.db sits in the data dir; storage/session/<project>/<id>.json below it
            candidates.append(os.path.join(d, "tool-output", base))
            d = os.path.dirname(d)
        for c in candidates:
            if os.path.basename(os.path.dirname(c)) == "tool-output" and os.path.isfile(c):
                try:
                    return _read_head_tail(c)
                except OSError:
                    continue
        return None

    def resume_command(self, row):
        # `opencode -s ID` continues a session in its own folder; run elsewhere, it hangs (1.18.33,
        # checked with the real CLI).
        return resume_in_folder(row, "opencode -s")


# -------------------------------------------------------------------------------------------------
# Gemini CLI (google-gemini/gemini-cli): ~/.gemini/tmp/<project>/chats/session-*.jsonl
# -------------------------------------------------------------------------------------------------

# Text Gemini CLI sends as a user turn but the human did not type.
_GEMINI_CONTEXT_BLOCK = LazyPattern(r"<session_context>.*?(?:</session_context>|\Z)", re.S)
_GEMINI_SETUP_PREFIX = "This is the Gemini CLI. We are setting up the context for our chat."
_GEMINI_SETUP_REPLY = "Got it. Thanks for the context!"
# Sub-agents the CLI runs on its own write a generated prompt as their first user message. The
# memory manager (0.35-0.40, memory-manager-agent.ts) sends "\n# Initial Context\n\n<every
# GEMINI.md it loaded, each as a '--- Context from: ... ---' block, then MCP servers' instructions>\n"
# followed by the request it was given; the skill extraction (memoryService.ts, skill-extraction-
# agent.ts) sends an index of the user's other sessions, ending with this sentence. Indexed as the
# user's words, 100 KB of GEMINI.md made every such sub-agent match every query about the project.
_GEMINI_INITIAL_CONTEXT = "# Initial Context"
_GEMINI_CONTEXT_END = LazyPattern(r"--- End of Context from: [^\n]*---[ \t]*\n|---\[end of server instructions\]---[ \t]*\n")
_GEMINI_SKILL_QUERY = "Analyze the session index above."
# A sub-agent's summary is its result as JSON, cut after ~200 characters with "..." (and so no longer
# JSON): the text of its "response" as far as it goes.
_GEMINI_RESPONSE_RE = LazyPattern(r'\s*\{\s*"response"\s*:\s*"((?:[^"\\]|\\.)*)')
# 0.61 wraps what a tool returned in these tags, for the model (it is data, not instructions): the
# same two words around every output, not what the tool said.
_GEMINI_UNTRUSTED = ("<untrusted_context>", "</untrusted_context>")


def _gemini_unwrapped(text):
    t = text.strip()
    if t.startswith(_GEMINI_UNTRUSTED[0]) and t.endswith(_GEMINI_UNTRUSTED[1]):
        return t[len(_GEMINI_UNTRUSTED[0]):-len(_GEMINI_UNTRUSTED[1])].strip("\n")
    return text


# A long tool output is cut in the record; the whole of it is in <project temp>/tool-outputs/.
_GEMINI_FULL_OUTPUT_RE = LazyPattern(r"For full output see: (\S+)")
# Later releases mask old outputs once a history grows long (ToolOutputMaskingService), in the
# recording too: "<tool_output_masked>\n{preview}\n\nOutput too large. Full output available at: PATH
# \n</tool_output_masked>". PATH holds the response as JSON (JSON.stringify(response, null, 2)); the
# preview is that JSON's first and last 250 characters around "... [TRUNCATED] ...", or for a shell
# command its fields with the output's first and last lines. Indexed as it was, every line of a
# preview was an escaped "\n" glued to its first word ("\nSpeaker" the token "nspeaker").
_GEMINI_MASKED_RE = LazyPattern(r"<tool_output_masked>\n(.*?)\n\nOutput too large\. Full output available at: "
                                r"([^\n]+)\n</tool_output_masked>", re.S)
_JSON_STRING_START = LazyPattern(r'\s*\{\s*"[A-Za-z_]+"\s*:\s*"')
_JSON_ESCAPE = LazyPattern(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_JSON_ESCAPED = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def json_string_text(text):
    """The text of a JSON object's first string value when `text` is that JSON, whole or cut (a
    preview of its ends): its escapes decoded as far as the text goes; else None."""
    start = _JSON_STRING_START.match(text)
    if not start:
        return None
    body = text[start.end():].rstrip()
    if body.endswith("}"):
        body = body[:-1].rstrip()
        body = body[:-1] if body.endswith('"') else body
    return _JSON_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)) if m.group(1) else _JSON_ESCAPED.get(m.group(2), m.group(2)),
                            body)


@register
class GeminiParser(Parser):
    """Gemini CLI chat recordings, JSONL (v0.39+) and the older whole-file JSON.

    JSONL: line 1 is the ConversationRecord metadata; then MessageRecord lines keyed by `id`, where a
    later line with the same id replaces the earlier one (in place); `{"$set": {...}}` merges metadata
    (a `$set.messages` list replaces the whole list); `{"$rewindTo": id}` drops that message and
    everything after it (all of them when the id is unknown, as the CLI does). The JSON form is the
    same record in one object. Checkpoint-style `Content[]` histories (role/parts) are read too.
    Sub-agents (`"kind": "subagent"`) live in chats/<parent id>/<sessionId>.json[l]: the folder is the
    id of the session that ran them (chatRecordingService.initialize), or a background job's own id
    (skill-extraction-<id>, the memory service's extraction agent); it is the session's `parent`.
    Every other .json/.jsonl file of the tree is listed and reported with why it is not read: `/chat
    save` checkpoints (copies of a session's history: they would index it twice), logs.json (prompts
    only), a legacy .json that a resume migrated into a .jsonl beside it.
    """

    id, label, version = "gemini", "Gemini CLI", 6
    verified = "0.61.0, 2026-11-25"
    records = ("user", "gemini", "model", "info", "error", "warning")   # MessageRecord types

    def default_roots(self, env):
        home = env_path(env, "GEMINI_CLI_HOME") or _home(env)   # replaces the home directory, .gemini stays
        return [os.path.join(home, ".gemini", "tmp")]

    def start_mark(self, root):
        # No prompt history names sessions (`gemini -p` 0.61 writes no logs.json), but every start finds its
        # project's folder name in ~/.gemini/projects.json under a lock (ProjectRegistry.getShortId:
        # proper-lockfile, projects.json.lock made and removed, since 0.29), which changes
        # ~/.gemini's time; a resumed session starts Gemini CLI (0.61.0, checked with the real CLI).
        return _start_mark(root, "tmp", "projects.json")

    def list_files(self, root):
        # Every JSON file of the tree, so that one Gemini CLI writes where this parser does not expect
        # it is reported (parse says why it is not a session) rather than missed in silence. Only the
        # full tool outputs are left out: they are read as part of their sessions (_full_output).
        if os.path.isfile(root):
            return [root] if root.endswith((".json", ".jsonl")) else []
        return walk_files(root, lambda n: n.endswith((".json", ".jsonl")), max_depth=4,
                          skip_dirs=("tool-outputs", "node_modules", ".git"))

    @staticmethod
    def _not_a_chat(path):
        """Why a JSON file of the Gemini tree is not read as a session, without reading it; None
        when it may be one."""
        name = os.path.basename(path)
        if name == "logs.json":
            return "the prompt log (logs.json): the prompts are in the chats' sessions"
        if name.startswith("checkpoint") and name.endswith(".json"):
            return "a /chat save checkpoint: a copy of a session's history"
        # Resuming a legacy .json session migrates it whole into a .jsonl beside it (name + "l").
        if name.endswith(".json") and os.path.isfile(path + "l"):
            return "a legacy session migrated into %sl when it was resumed" % name
        return None

    # JSONL recordings are only appended to; see _read for where a read stops and goes on.
    resumable = True
    # The metadata a session's row needs: the rest (memoryScratchpad, directories...) is not carried.
    META_KEYS = ("sessionId", "projectHash", "startTime", "start_time", "lastUpdated", "summary")

    def parse(self, path, report, resume=None, limit=None):
        reason = self._not_a_chat(path)
        if reason:
            raise NotASessionFile(reason)
        if resume is not None or first_json_line(path) is not None:
            return self._parse_jsonl(path, report, resume, limit)
        whole = _load_json_file(path)
        history = None
        if isinstance(whole, dict) and isinstance(whole.get("messages"), list):
            meta, messages = whole, [m for m in whole["messages"] if isinstance(m, dict)]
        elif isinstance(whole, dict) and isinstance(whole.get("history"), list):
            meta, messages, history = whole, [], whole["history"]
        elif isinstance(whole, list) and all(isinstance(c, dict) and "parts" in c for c in whole[:5]):
            meta, messages, history = {}, [], whole   # a /chat save checkpoint: bare Content[]
        else:
            raise NotASessionFile("no Gemini conversation record")
        sid = meta.get("sessionId") if isinstance(meta.get("sessionId"), str) else \
            os.path.splitext(os.path.basename(path))[0]
        s = self._session(path, sid, meta)
        first_user = []
        if history is not None:
            self._history(s, history, report, first_user)
        else:
            calls = {}
            for m in messages:
                self._message(s, m, report, first_user, calls)
        self._finish(s, path, meta, first_user, (s.created, s.modified))
        return [s]

    def _session(self, path, sid, meta):
        s = Session(self.id, sid, path)
        chats = os.path.dirname(path)
        if os.path.basename(os.path.dirname(chats)) == "chats":
            s.parent = os.path.basename(chats)   # chats/<parent id>/<sessionId>.json[l]
            chats = os.path.dirname(chats)
        s.cwd = self._cwd(chats, meta.get("projectHash"))
        return s

    def _finish(self, s, path, meta, first_user, span):
        """Times (the recording's, widened by its messages'), and the name: the generated summary,
        else the first real prompt (as Gemini CLI titles a session)."""
        s.created = s.modified = None
        s.touch(norm_time(meta.get("startTime") or meta.get("start_time")))
        s.touch(norm_time(meta.get("lastUpdated")))
        for ts in span:
            s.touch(ts)
        summary = meta.get("summary")
        if isinstance(summary, str) and summary.lstrip().startswith("{"):
            # A sub-agent's summary is its result as JSON ({"response": "..."}): the text is the name.
            parsed = _json_value(summary)
            if isinstance(parsed, dict):
                summary = parsed.get("response", summary)
            elif _GEMINI_RESPONSE_RE.match(summary):
                summary = _json_value('"%s"' % _GEMINI_RESPONSE_RE.match(summary).group(1)) or summary
        if isinstance(summary, str) and summary.strip():
            s.name = _one_line(summary, 200)
        elif first_user:
            s.name = _one_line(first_user[0])
        _finish_times(s, path)

    def _parse_jsonl(self, path, report, resume, limit):
        """A JSONL recording, from the start or from a checkpoint. The checkpoint is the first line of
        the last message: Gemini CLI writes a message again (same id) while it grows (its tool calls,
        their results, its tokens), and only its last one (ChatRecordingService.pushMessage). The
        state carries the metadata, the first prompt (the name), the calls already complete (their
        results copied into later user messages are not indexed twice), the time span and a CRC of
        each message id indexed. A line appended after it that rewrites what was indexed (a
        $rewindTo, a $set.messages checkpoint, a message indexed before written again) makes the
        file read again from its start (ReadAgain): rare (a /rewind, a resume), and never wrong."""
        state = resume["state"] if resume else {}
        start = resume["offset"] if resume else 0
        meta = dict(state.get("meta") or {})
        seen = set(state.get("seen") or ())
        messages, opened, changed_at, read_to, complete = self._read(path, report, start, meta, seen, limit)
        if not isinstance(meta.get("sessionId"), str):
            raise NotASessionFile("no Gemini session metadata line")
        s = self._session(path, meta["sessionId"], meta)
        first_user = [state["first"]] if state.get("first") else []
        calls = dict.fromkeys(state.get("done") or ())
        span = state.get("span") or [None, None]
        for t in span:
            s.touch(t)
        real = state.get("real", False)
        # Where the next read goes on: before the last message (it may be written again), or where
        # a sliced read stopped; only when no call waits for its result and nothing after it
        # changed an earlier message.
        last = next(reversed(messages), None) if complete else None
        at = opened.get(last) if last is not None else (read_to, dict(meta))
        checkpoint = None
        for m in messages.values():
            if m["id"] == last and at is not None:
                checkpoint = self._checkpoint(s, at, calls, first_user, seen, real, messages, last)
            self._message(s, m, report, first_user, calls)
        if last is None and at is not None:
            checkpoint = self._checkpoint(s, at, calls, first_user, seen, real, messages, None)
        if checkpoint is not None and at[0] >= changed_at:
            checkpoint["seq"] += resume["seq"] if resume else 0
            s.checkpoint = checkpoint
        if not real and not any(c.kind != "context" for c in s.chunks):
            if resume:
                raise ReadAgain()   # whether it is a resume stub is decided on the whole file
            if self._resume_stub(path, s, meta["sessionId"]):
                return []
        s.complete = complete
        self._finish(s, path, meta, first_user, (s.created, s.modified))
        return [s]

    @staticmethod
    def _checkpoint(s, at, calls, first_user, seen, real, messages, last):
        """The checkpoint before message `last` (None: after every message read), or None while a
        call still waits for its result."""
        if any(v is not None for v in calls.values()):
            return None
        ids = set(seen)
        for mid in messages:
            if mid == last:
                break
            ids.add(zlib.crc32(mid.encode("utf-8", "surrogatepass")))
        offset, meta = at
        return {"offset": offset, "seq": len(s.chunks), "state": {
            "meta": {k: meta[k] for k in GeminiParser.META_KEYS if k in meta},
            "first": first_user[0] if first_user else None,
            "done": [k for k in calls if isinstance(k, str)], "span": [s.created, s.modified],
            "real": real or any(c.kind != "context" for c in s.chunks), "seen": sorted(ids)}}

    @staticmethod
    def _read(path, report, start, meta, seen, limit):
        """The records from `start` on: {id: message} in order (an id written again replaces its
        record in place, as Gemini CLI's loader does), `meta` updated in place; also where each
        message first appeared (with the metadata then), the offset after the last line that changed
        an earlier message, where the read stopped and whether it reached the end. `seen` holds the
        CRCs of the message ids indexed before `start`: a line that changes one raises ReadAgain."""
        messages, opened, changed_at, prev = {}, {}, 0, start
        for offset, rec in iter_jsonl(path, report, start):
            if isinstance(rec.get("$rewindTo"), str):
                target = rec["$rewindTo"]
                if target in messages:
                    while True:   # the target and every message after it, newest first (each goes once)
                        mid = next(reversed(messages))
                        del messages[mid]
                        if mid == target:
                            break
                else:
                    if seen:
                        raise ReadAgain()
                    messages.clear()   # an unknown id: every message goes, as the CLI does
                changed_at = offset
            elif isinstance(rec.get("$set"), dict):
                upd = rec["$set"]
                if isinstance(upd.get("messages"), list):   # a checkpoint: the list as it now is
                    if seen:
                        raise ReadAgain()
                    messages = {m["id"]: m for m in upd["messages"] if isinstance(m, dict) and isinstance(m.get("id"), str)}
                    changed_at = offset
                meta.update((k, v) for k, v in upd.items() if k != "messages")
            elif isinstance(rec.get("sessionId"), str) and "id" not in rec:
                # A resume appends another metadata line: its startTime is the resume, not the creation.
                meta.update((k, v) for k, v in rec.items() if k != "messages" and not (k == "startTime" and k in meta))
                if isinstance(rec.get("messages"), list):   # a legacy whole record on one line
                    if seen:
                        raise ReadAgain()
                    messages = {m["id"]: m for m in rec["messages"] if isinstance(m, dict) and isinstance(m.get("id"), str)}
                    changed_at = offset
            elif isinstance(rec.get("id"), str):
                mid = rec["id"]
                if mid in messages:
                    if mid != next(reversed(messages)):
                        changed_at = offset   # an earlier message written again
                else:
                    if seen and zlib.crc32(mid.encode("utf-8", "surrogatepass")) in seen:
                        raise ReadAgain()
                    if limit and prev - start >= limit and messages:
                        return messages, opened, changed_at, prev, False   # a slice ends before a message
                    opened[mid] = (prev, dict(meta))
                messages[mid] = rec   # same id again: the newer record wins, in its old place
            else:
                report.skip("unknown record")
            prev = offset
        return messages, opened, changed_at, prev, True

    @staticmethod
    def _parts_text(content, want_thought=False):
        """Text of a PartListUnion (a string, a part, or a list of them); images and calls skipped."""
        if isinstance(content, str):
            return "" if want_thought else content
        if isinstance(content, dict):
            content = [content]
        out = []
        for p in content if isinstance(content, list) else []:
            if isinstance(p, str) and not want_thought:
                out.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str) and bool(p.get("thought")) == want_thought:
                out.append(p["text"])
        return "\n".join(out)

    def _user_text(self, s, text, ts, first_user, display=None):
        """One user turn: split what Gemini CLI injected from what the human typed."""
        if text.startswith(_GEMINI_SETUP_PREFIX) or (_GEMINI_SKILL_QUERY in text and text.lstrip().startswith("# ")):
            s.add("context", text, role="user", ts=ts)
            return
        if text.lstrip().startswith(_GEMINI_INITIAL_CONTEXT):
            # The request comes after the last block of context (all of it is context without one).
            ends = list(_GEMINI_CONTEXT_END.finditer(text))
            cut = ends[-1].end() if ends else len(text)
            s.add("context", text[:cut], role="user", ts=ts)
            text = text[cut:]
        if text.lstrip().startswith("<state_snapshot>"):   # history compression summary
            s.add("summary", text, role="user", ts=ts)
            return
        injected = _GEMINI_CONTEXT_BLOCK.findall(text)
        if injected:
            s.add("context", "\n".join(injected), role="user", ts=ts)
            text = _GEMINI_CONTEXT_BLOCK.sub("", text)
        if display is not None and display.strip():
            # displayContent is what was typed; content is what was sent (@file contents expanded).
            if text.strip() != display.strip():
                s.add("context", text, role="user", ts=ts)
            text = display
        if text.strip():
            s.add("user", text, role="user", ts=ts)
            first_user.append(text)

    @staticmethod
    def _resume_stub(path, s, sid):
        """A resume can leave a second file with the same sessionId that holds only the metadata and
        the session context. The session is the other file: this one is indexed as nothing."""
        if any(c.kind != "context" for c in s.chunks):
            return False
        path = os.path.abspath(path)
        folder = os.path.dirname(path)
        size = os.path.getsize(path)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return False
        for name in names:
            other = os.path.join(folder, name)
            if other == path or not (name.startswith("session-") and name.endswith(".jsonl")):
                continue
            try:
                bigger = (os.path.getsize(other), path) > (size, other)   # the fuller one; ties: first name
            except OSError:
                continue
            head = first_json_line(other) if bigger else None
            if isinstance(head, dict) and head.get("sessionId") == sid:
                return True
        return False

    def _message(self, s, m, report, first_user, calls):
        """One MessageRecord. `calls` holds the tool calls by call id: a call made only of a
        `functionCall` part (the `$set.messages` list a resume writes has no `toolCalls`) waits for its
        `functionResponse` in a later user message; a response to a call already complete is a copy."""
        mtype = self.record_type(report, m)
        ts = norm_time(m.get("timestamp"))
        s.touch(ts)
        content = m.get("content") if "content" in m else m.get("parts")
        if mtype == "user":
            display = m.get("displayContent")
            display = self._parts_text(display) if display is not None else None
            self._user_text(s, self._parts_text(content), ts, first_user, display)
            for part in content if isinstance(content, list) else []:
                fr = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(fr, dict):
                    self._function_response(s, fr, ts, calls)
        elif mtype in ("gemini", "model"):
            thoughts = []
            for t in m.get("thoughts") if isinstance(m.get("thoughts"), list) else []:
                if isinstance(t, dict):
                    thoughts.append(": ".join(str(t[k]) for k in ("subject", "description") if t.get(k)))
            thoughts.append(self._parts_text(content, want_thought=True))
            s.add("thinking", "\n".join(t for t in thoughts if t), role="assistant", ts=ts)
            s.add("assistant", self._parts_text(content), role="assistant", ts=ts)
            for call in m.get("toolCalls") if isinstance(m.get("toolCalls"), list) else []:
                if isinstance(call, dict):
                    self._tool_call(s, call, ts)
                    calls[_id_key(call.get("id")) or object()] = None   # complete: its responses are copies
            for part in content if isinstance(content, list) else []:
                fc = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(fc, dict) and (_id_key(fc.get("id")) or object()) not in calls:
                    name = str(fc.get("name") or "tool")
                    args = fc.get("args") if isinstance(fc.get("args"), dict) else None
                    s.add("tool", tool_text(name, args), role="assistant", tool=name, path=tool_path(args), ts=ts)
                    calls[_id_key(fc.get("id")) or name] = (len(s.chunks) - 1, name, args)
        elif mtype in ("info", "error", "warning"):
            s.add("context", self._parts_text(content), role=mtype, ts=ts)   # the CLI talking, not the model

    @staticmethod
    def _response_text(response):
        if isinstance(response, str):
            return _gemini_unwrapped(response)
        if isinstance(response, dict):
            for key in ("output", "error", "content", "result"):
                v = response.get(key)
                if isinstance(v, str) and v:
                    return _gemini_unwrapped(v)
            return json.dumps(response, ensure_ascii=False) if response else ""
        return ""

    def _function_response(self, s, fr, ts, calls):
        key = _id_key(fr.get("id")) or _id_key(fr.get("name"))
        if key in calls and calls[key] is None:
            return   # the call's toolCalls entry already holds this result
        out = self._full_output(s, self._response_text(fr.get("response")))
        call = calls.get(key)
        calls[key] = None
        if call:
            idx, name, args = call
            s.chunks[idx].text = self._result_text(name, args, out, fr.get("response"))
        else:
            name = str(fr.get("name") or "tool")
            s.add("tool", self._result_text(name, None, out, fr.get("response")), role="tool",
                  tool=name, ts=ts)

    @staticmethod
    def _full_output(s, output):
        """The whole output of a call Gemini CLI cut ("Output too large. Showing first 8,000 and last
        32,000 characters. For full output see: PATH") or masked (_GEMINI_MASKED_RE), from the file it
        saved (_saved_output); else the cut output, or the masked one's preview as text."""
        def unmasked(masked):
            saved = GeminiParser._saved_output(s, masked.group(2).strip())
            if saved is not None:   # the response as JSON: its text, as an output not masked gives
                try:
                    return GeminiParser._response_text(json.loads(saved))
                except BAD_JSON:
                    return json_string_text(saved) or saved   # (a huge one, read in head and tail)
            preview = masked.group(1)
            return json_string_text(preview) or preview   # (a shell command's preview is its fields)
        if output and "<tool_output_masked>" in output:   # (one part of a result of several, or all)
            return _GEMINI_MASKED_RE.sub(unmasked, output)
        m = _GEMINI_FULL_OUTPUT_RE.search(output[:1000]) if output else None
        if not m:
            return output
        saved = GeminiParser._saved_output(s, m.group(1))
        return output if saved is None else saved

    @staticmethod
    def _saved_output(s, path):
        """The text of a whole output Gemini CLI saved apart, at `path` or, when the folder moved, in
        tool-outputs/session-<id>/ of this project's temp dir (only there: a path in a transcript is
        read only if it is a file of such a folder, `..` resolved first); None when it is not there."""
        base = re.split(r"[/\\]", path)[-1]
        d = os.path.dirname(os.path.abspath(s.path))
        while os.path.basename(d) != "chats" and os.path.dirname(d) != d:
            d = os.path.dirname(d)
        for c in (path, os.path.join(os.path.dirname(d), "tool-outputs", "session-" + s.session_id, base)):
            parts = os.path.normpath(c).split(os.sep)[-3:]   # (<temp dir>/tool-outputs[/session-<id>]/<file>)
            if len(parts) == 3 and ("tool-outputs" == parts[1] or parts[0] == "tool-outputs"
                                    and parts[1].startswith("session-")) and os.path.isfile(c):
                try:
                    return _read_head_tail(c)
                except OSError:
                    continue
        return None

    def _result_text(self, name, args, out, response=None, failed=None):
        """A call's chunk text with its result: failed when the response or the shell's exit code says
        so; a shell command's output without the fields around it (shell_fields)."""
        if failed is None:
            failed = self._failed(name, response, out)
        return tool_text(name, args, shell_fields(out) if name == "run_shell_command" else out, failed)

    @staticmethod
    def _failed(name, response, output):
        """An error response, or a shell command whose output names a non-zero exit code (the call's
        status stays "success": run_shell_command writes "Exit Code: N" into its output)."""
        if isinstance(response, dict) and response.get("error"):
            return True
        m = SHELL_EXIT_RE.search(output or "")
        return bool(m and int(m.group(1)) != 0)

    def _tool_call(self, s, call, ts):
        name = str(call.get("name") or call.get("displayName") or "tool")
        args = call.get("args") if isinstance(call.get("args"), dict) else None
        outputs = []
        result = call.get("result")
        for part in result if isinstance(result, list) else [result] if isinstance(result, dict) else []:
            if not isinstance(part, dict):
                continue
            fr = part.get("functionResponse")
            if isinstance(fr, dict):
                outputs.append(self._response_text(fr.get("response")))
            elif isinstance(part.get("text"), str):
                outputs.append(part["text"])
        output = "\n".join(o for o in outputs if o)
        if not output and isinstance(call.get("resultDisplay"), str):
            output = call["resultDisplay"]
        output = self._full_output(s, output)
        path = tool_path(args) or (args.get("absolute_path") if args and isinstance(args.get("absolute_path"), str) else None)
        failed = call.get("status") == "error" or any(
            self._failed(name, p["functionResponse"].get("response"), output) for p in
            (result if isinstance(result, list) else [result]) if isinstance(p, dict) and
            isinstance(p.get("functionResponse"), dict)) or self._failed(name, None, output)
        s.add("tool", self._result_text(name, args, output, failed=failed), role="assistant",
              tool=name, path=path, ts=norm_time(call.get("timestamp")) or ts)

    def _history(self, s, history, report, first_user):
        """Gemini API Content[] (checkpoints, early recordings): {role, parts:[text|functionCall|...]}."""
        calls = {}   # call id (or name) -> (chunk index, name, args)
        for turn in history:
            if not isinstance(turn, dict):
                report.skip("malformed turn")
                continue
            role, parts = turn.get("role"), turn.get("parts")
            ts = norm_time(turn.get("ts") or turn.get("timestamp"))
            s.touch(ts)
            parts = parts if isinstance(parts, list) else []
            text = self._parts_text(parts)
            if role == "user":
                self._user_text(s, text, ts, first_user)
                for p in parts:
                    fr = p.get("functionResponse") if isinstance(p, dict) else None
                    if isinstance(fr, dict):
                        call = calls.pop(fr.get("id"), None) or calls.pop(fr.get("name"), None)
                        out = self._response_text(fr.get("response"))
                        if call:
                            idx, name, args = call
                            s.chunks[idx].text = self._result_text(name, args, out, fr.get("response"))
                        else:
                            name = str(fr.get("name") or "tool")
                            s.add("tool", self._result_text(name, None, out, fr.get("response")), role="tool",
                                  tool=name, ts=ts)
            elif role in ("model", "gemini"):
                s.add("thinking", self._parts_text(parts, want_thought=True), role="assistant", ts=ts)
                if text.strip() == _GEMINI_SETUP_REPLY:
                    s.add("context", text, role="assistant", ts=ts)
                else:
                    s.add("assistant", text, role="assistant", ts=ts)
                for p in parts:
                    fc = p.get("functionCall") if isinstance(p, dict) else None
                    if isinstance(fc, dict):
                        name = str(fc.get("name") or "tool")
                        args = fc.get("args") if isinstance(fc.get("args"), dict) else None
                        s.add("tool", tool_text(name, args), role="assistant", tool=name, path=tool_path(args), ts=ts)
                        calls[_id_key(fc.get("id")) or name] = (len(s.chunks) - 1, name, args)
            else:
                report.skip("unknown role")

    @staticmethod
    def _cwd(chats_dir, project_hash):
        """The project folder, from the records Gemini CLI keeps beside the chats, never from a dir name:
        <project temp dir>/.project_root (v0.29+), else ~/.gemini/projects.json, matched by slug or by
        the SHA-256 projectHash that every recording carries."""
        project_dir = os.path.dirname(chats_dir)
        try:
            with open_regular(os.path.join(project_dir, ".project_root")) as f:
                root = f.read().decode("utf-8").strip()
            if root:
                return root
        except (OSError, UnicodeDecodeError):
            pass
        registry = os.path.join(os.path.dirname(os.path.dirname(project_dir)), "projects.json")
        try:
            projects = _load_json_file(registry)
        except OSError:
            return None
        projects = projects.get("projects") if isinstance(projects, dict) else None
        if not isinstance(projects, dict):
            return None
        slug = os.path.basename(project_dir)
        for abs_path, value in projects.items():
            if value == slug:
                return abs_path
        if isinstance(project_hash, str):
            import hashlib
            for abs_path in projects:
                if hashlib.sha256(abs_path.encode("utf-8")).hexdigest() == project_hash:
                    return abs_path
        return None

    def retention(self, env):
        """Gemini CLI deletes sessions older than general.sessionRetention.maxAge when it is enabled."""
        settings = os.path.join(env_path(env, "GEMINI_CLI_HOME") or _home(env), ".gemini", "settings.json")
        policy = ((_read_json(settings) or {}).get("general") or {}).get("sessionRetention")
        if not isinstance(policy, dict) or policy.get("enabled") is not True:
            return None
        m = re.fullmatch(r"\s*(\d+)\s*([hdwm])\s*", str(policy.get("maxAge") or ""))
        days = int(m.group(1)) * {"h": 1 / 24, "d": 1, "w": 7, "m": 30}[m.group(2)] if m else None
        return {"days": days, "setting": "general.sessionRetention in %s" % settings}

    def resume_command(self, row):
        return None   # Gemini CLI resumes by list index or `latest`, not by session id


# -------------------------------------------------------------------------------------------------
# Cursor (closed source; what cursor-agent and the IDE write): ~/.cursor transcripts and store.db, state.vscdb
# -------------------------------------------------------------------------------------------------

_CURSOR_QUERY = LazyPattern(r"<user_query>\s*(.*?)\s*</user_query>", re.S)
# Blocks Cursor wraps around a prompt (environment, rules, open files...): never the user's words.
_CURSOR_INJECTED = LazyPattern(
    r"<(user_info|system_reminder|system-reminder|attached_files|attached_folders|open_and_recently_viewed_files|"
    r"additional_data|git_status|rules|always_applied_workspace_rules|agent_requestable_workspace_rules|"
    r"agent_skills|available_skills|manually_attached_skills|project_layout|cursor_commands|terminal_files_information|"
    r"image_files|mcp_instructions|linter_errors|current_file|environment_details|user_rules)>.*?</\1>", re.S)
_CURSOR_WORKSPACE = LazyPattern(r"Workspace Path:\s*(\S[^\n<]*)")
# Names Cursor gives before (or instead of) a generated title.
_CURSOR_PLACEHOLDER_NAMES = ("", "New Agent", "New Chat", "New Composer", "Untitled")
_CURSOR_SKIP_DIRS = ("extensions", "node_modules", ".git", "worktrees", "ai-tracking", "snapshots")
_SQLITE_MAGIC = b"SQLite format 3\x00"


# The Cursor CLI's tools, by their field number in agent.v1.ToolCall (a oneof); each tool's message is
# {1: args, 2: result}. The numbers are Cursor's own (its bundled protobuf descriptors).
_CURSOR_TOOLS = {
    1: "shell", 3: "delete", 4: "glob", 5: "grep", 8: "read", 9: "update_todos", 10: "read_todos", 12: "edit",
    13: "ls", 14: "read_lints", 15: "mcp", 16: "sem_search", 17: "create_plan", 18: "web_search", 19: "task",
    20: "list_mcp_resources", 21: "read_mcp_resource", 22: "apply_agent_diff", 23: "ask_question", 24: "fetch",
    25: "switch_mode", 28: "generate_image", 29: "record_screen", 30: "computer_use", 31: "write_shell_stdin",
    32: "reflect", 33: "setup_vm_environment", 34: "truncated", 37: "web_fetch", 42: "await",
    44: "get_mcp_tools", 55: "send_message", 58: "send_to_user", 61: "pi_read", 62: "pi_bash", 63: "pi_edit",
    64: "pi_write", 65: "pi_grep", 66: "pi_find", 67: "pi_ls", 69: "search_conversations"}
# Fields of agent.v1.ToolCall beside the tool: hook contexts, the call id, start and end times (ms).
_CURSOR_TOOL_META = frozenset({54, 57, 59, 60})
# The arguments indexed by name, per tool (field number -> name); other tools give their strings.
_CURSOR_TOOL_ARGS = {
    "shell": {1: "command", 2: "working_directory"}, "read": {1: "path"}, "edit": {1: "path", 6: "content"},
    "delete": {1: "path"}, "ls": {1: "path"}, "grep": {1: "pattern", 2: "path", 3: "glob"},
    "glob": {1: "target_directory", 2: "glob_pattern"}, "mcp": {1: "name", 4: "provider", 5: "tool_name"},
    "task": {1: "description", 2: "prompt"}, "fetch": {1: "url"}, "web_fetch": {1: "url"},
    "web_search": {1: "search_term"}, "sem_search": {1: "query"}}


_CONTROL_CHARS = LazyPattern(r"[\x00-\x08\x0e-\x1f]")   # bytes with these are no text


def _varint(data, i):
    shift = value = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def protobuf_fields(data):
    """The (field number, value) pairs of one protobuf message, in wire order: varints and fixed
    64/32-bit fields as ints, length-delimited fields as bytes (a string, bytes, a nested message or
    a packed list: only the schema, which the reader does not have, tells which). Raises ValueError
    for bytes that are not a well-formed message (groups, wire types 3 and 4, are not proto3)."""
    out, i, n = [], 0, len(data)
    while i < n:
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > n:
                raise ValueError("length past the end")
            value, i = bytes(data[i:i + size]), i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if i + size > n:
                raise ValueError("fixed field past the end")
            value, i = int.from_bytes(data[i:i + size], "little"), i + size
        else:
            raise ValueError("wire type %d" % wire)
        out.append((field, value))
    return out


class ProtoMessage:
    """A decoded protobuf message read by field number: `get` is a field's (last) value, `all` a
    repeated field's values, `text` a string, `message` a nested message (None when absent or not a
    message)."""

    def __init__(self, data):
        self.fields = {}
        for field, value in protobuf_fields(data):
            self.fields.setdefault(field, []).append(value)

    @classmethod
    def parse(cls, data):
        """The message, or None when `data` is not one."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            return None
        try:
            return cls(bytes(data))
        except ValueError:
            return None

    def get(self, n):
        values = self.fields.get(n)
        return values[-1] if values else None

    def all(self, n):
        return self.fields.get(n, [])

    def text(self, n):
        value = self.get(n)
        if isinstance(value, bytes):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None

    def message(self, n):
        return ProtoMessage.parse(self.get(n))

    def strings(self, depth=4):
        """Every text in the message and the messages it holds (for messages read without a schema)."""
        found = []
        for values in self.fields.values():
            for v in values:
                if not isinstance(v, bytes) or not v:
                    continue
                try:
                    t = v.decode("utf-8")
                except UnicodeDecodeError:
                    t = None
                if t is not None and not _CONTROL_CHARS.search(t):
                    found.append(t)
                elif depth:
                    inner = ProtoMessage.parse(v)
                    if inner is not None:
                        found.extend(inner.strings(depth - 1))
        return found


def _cursor_roots_ide(env):
    """globalStorage of the Cursor editor, per OS (VS Code layout)."""
    home = _home(env)
    if env_platform(env) == "darwin":
        base = os.path.join(home, "Library", "Application Support")
    elif env_platform(env).startswith("win"):
        base = env.get("APPDATA") or os.path.join(home, "AppData", "Roaming")
    else:
        base = env_path(env, "XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(base, "Cursor", "User", "globalStorage")


@register
class CursorParser(Parser):
    """Cursor's three stores.

    * Agent transcripts: ~/.cursor/projects/<enc-path>/agent-transcripts/<id>/<id>.jsonl, one
      `{role, message: {content: [Anthropic-style blocks]}}` per line, no timestamps; sub-agents in
      <id>/subagents/<child>.jsonl. The prompt is wrapped in `<user_query>`; the rest is context.
    * Cursor CLI: ~/.cursor/chats/<md5(cwd)>/<id>/store.db, table meta (key "0" = hex-encoded JSON:
      agentId, name, createdAt, latestRootBlobId) and blobs named by the SHA-256 of their bytes; meta.json
      beside it adds the cwd and times. The root blob is a protobuf ConversationStateStructure: field 1
      lists JSON prompt messages (system prompt, injected context), field 8 the turns. A turn holds the
      user's message and its steps (assistant text, thinking, tool calls with their results), each a
      protobuf blob of its own; a shell turn is a command the user ran. Stores older than turns hold
      the conversation as JSON messages (AI SDK parts), read in root order, else in the order written.
      The same chat's transcript (below) is then not indexed again: the store has more (tool output,
      times).
    * The editor: globalStorage/state.vscdb, table cursorDiskKV: `composerData:<id>` (name, times,
      ordered bubble headers) and `bubbleId:<composer>:<bubble>` (type 1 user, 2 assistant). One
      database gives every editor chat.
    """

    id, label, version = "cursor", "Cursor", 3
    # Transcript lines and the CLI store's JSON messages by role (a transcript's `turn_ended` has
    # none); Anthropic-style and AI SDK-style blocks. The store's protobuf turns, steps and tools and
    # the editor's bubble types are counted where they are read.
    records, skipped_records = ("user", "assistant", "system", "tool"), ("turn_ended",)
    blocks = ("text", "tool_result", "tool-result", "tool_use", "tool_call", "tool-call", "thinking", "reasoning")
    # Transcript lines and content blocks read for nothing on purpose.
    skipped_blocks = frozenset({"image", "redacted", "redacted_thinking", "file", "image_url"})

    def default_roots(self, env):
        return [os.path.join(_home(env), ".cursor"), _cursor_roots_ide(env)]

    def sidecars(self, path):
        # WAL stores: a prompt may change only the -wal file (and the CLI's meta.json).
        if path.endswith("store.db"):
            return [path + "-wal", os.path.join(os.path.dirname(path), "meta.json")]
        return [path + "-wal"] if path.endswith(".vscdb") else []

    def list_files(self, root):
        if os.path.isfile(root):
            return [root] if root.endswith((".jsonl", ".db", ".vscdb")) else []
        ide_db = os.path.join(root, "state.vscdb")
        if os.path.basename(os.path.normpath(root)) == "globalStorage":
            # The editor's globalStorage also holds every extension's files: only its own DB counts.
            return [ide_db] if os.path.isfile(ide_db) else []
        found = walk_files(root, lambda n: n.endswith(".jsonl") or n in ("store.db", "state.vscdb"),
                           max_depth=5, skip_dirs=_CURSOR_SKIP_DIRS)
        root_parts = os.path.abspath(root).split(os.sep)
        return [p for p in found if not p.endswith(".jsonl")
                or "agent-transcripts" in os.path.abspath(p).split(os.sep) or "agent-transcripts" in root_parts]

    def parse(self, path, report):
        if path.endswith(".jsonl"):
            return self._parse_transcript(path, report)
        with open_regular(path) as f:
            if f.read(16) != _SQLITE_MAGIC:
                raise NotASessionFile("neither a transcript nor an SQLite store")
        con = open_agent_db(path)
        try:
            tables = _table_names(con)
            if "cursorDiskKV" in tables:
                return self._parse_vscdb(con, path, report)
            if {"meta", "blobs"} <= tables:
                return [self._parse_store(con, path, report)]
            raise NotASessionFile("unknown schema: neither cursorDiskKV nor meta/blobs")
        finally:
            con.close()

    # -- text helpers ------------------------------------------------------------------------------

    @staticmethod
    def _user_text(s, text, ts=None):
        """A user turn: the words inside <user_query> are the user's; everything around them (user_info,
        rules, open files, reminders) is injected context. Without the wrapper, known injected blocks
        are split off and the rest is the user's."""
        queries = _CURSOR_QUERY.findall(text)
        if queries:
            rest, user = _CURSOR_QUERY.sub("", text), "\n\n".join(queries)
        else:
            rest = "\n".join(m.group(0) for m in _CURSOR_INJECTED.finditer(text))
            user = _CURSOR_INJECTED.sub("", text)
        if rest.strip():
            s.add("context", rest, role="user", ts=ts)
            m = _CURSOR_WORKSPACE.search(rest)
            if m and s.cwd is None:
                s.cwd = m.group(1).strip()
        s.add("user", user, role="user", ts=ts)

    @staticmethod
    def _name(value):
        return value.strip() if isinstance(value, str) and value.strip() not in _CURSOR_PLACEHOLDER_NAMES else None

    @staticmethod
    def _output_text(content):
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return text_of(content)
        if isinstance(content, dict):
            return json.dumps(content, ensure_ascii=False)
        return ""

    def _blocks(self, s, role, content, calls, ts=None, report=None):
        """Anthropic-style (tool_use/tool_result) and AI-SDK-style (tool-call/tool-result) blocks."""
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = self.block_type(report, block)
            if btype in ("tool_result", "tool-result"):
                out = block.get("content") if "content" in block else block.get("result")
                self._tool_result(s, calls, block.get("tool_use_id") or block.get("toolCallId"),
                                  block.get("name") or block.get("toolName"), self._output_text(out),
                                  bool(block.get("is_error") or block.get("isError")), ts)
            elif btype in ("tool_use", "tool_call", "tool-call"):
                name = str(block.get("name") or block.get("toolName") or "tool")
                args = block.get("input") if "input" in block else block.get("args")
                s.add("tool", tool_text(name, args), role="assistant", tool=name, path=tool_path(args), ts=ts)
                calls.append([block.get("id") or block.get("toolCallId"), len(s.chunks) - 1, name, args])
            elif btype in ("thinking", "reasoning"):
                t = block.get("thinking") if isinstance(block.get("thinking"), str) else block.get("text")
                s.add("thinking", t if isinstance(t, str) else "", role="assistant", ts=ts)
            elif isinstance(block.get("text"), str):   # text, and unknown blocks that carry visible text
                if role == "user":
                    self._user_text(s, block["text"], ts)
                else:
                    s.add("assistant", block["text"], role="assistant", ts=ts)

    @staticmethod
    def _tool_result(s, calls, call_id, name, output, is_error, ts):
        """Put a result into its call's chunk: by call id; else (ids are often missing in transcripts)
        the oldest call still waiting, of the same tool when the result names one."""
        match = None
        for i, (cid, _, cname, _) in enumerate(calls):
            if call_id and cid == call_id:
                match = i
                break
        if match is None:
            for i, (cid, _, cname, _) in enumerate(calls):
                if not (cid and call_id) and (not name or name == cname):
                    match = i
                    break
        if match is None:
            tname = str(name or "tool")
            s.add("tool", tool_text(tname, None, output, is_error), role="tool", tool=tname, ts=ts)
            return
        _, idx, cname, args = calls.pop(match)
        s.chunks[idx].text = tool_text(cname, args, output, is_error)

    # -- agent transcripts (JSONL) ----------------------------------------------------------------------

    def _parse_transcript(self, path, report):
        first = first_json_line(path)
        if not first or not (first.get("role") in ("user", "assistant", "system") or first.get("type") == "turn_ended"):
            raise NotASessionFile("no Cursor transcript line")
        sid = os.path.splitext(os.path.basename(path))[0]
        # The CLI's store.db for the same chat id (if any) holds the same conversation with its tool
        # output and times: the chat is indexed from there. Else it knows the start and the title.
        meta, store_has_chat = {}, False
        db = self._cli_store_for(path, sid)
        if db:
            try:
                con = open_agent_db(db)
                try:
                    meta = self._meta(con) or {}
                    store_has_chat = bool(meta) and bool(self._parse_store(con, db, ParseReport()).chunks)
                finally:
                    con.close()
            except (OSError, sqlite3.DatabaseError, NotASessionFile):
                pass
        if store_has_chat:
            return []
        s = Session(self.id, sid, path)
        if os.path.basename(os.path.dirname(path)) == "subagents":
            s.parent = os.path.basename(os.path.dirname(os.path.dirname(path)))
        calls = []
        for _, rec in iter_jsonl(path, report):
            role = self.record_type(report, rec, *(("role", "role ") if "role" in rec else ()))
            msg = rec.get("message")
            if "role" not in rec:
                continue
            content = msg.get("content") if isinstance(msg, dict) else rec.get("content")
            if role in ("user", "assistant"):
                self._blocks(s, role, content, calls, report=report)
        # No timestamps in the lines: the file's mtime is the last activity.
        s.modified = file_mtime_iso(path)
        s.created = norm_time(meta.get("createdAt")) or s.modified
        if s.created > s.modified:
            s.created = s.modified
        s.name = self._name(meta.get("name"))
        return [s]

    @staticmethod
    def _cli_store_for(path, sid):
        """The CLI's store.db of the chat whose transcript is `path`: ~/.cursor/chats/*/<id>/store.db."""
        parts = os.path.abspath(path).split(os.sep)
        if "projects" not in parts:
            return None
        cursor_dir = os.sep.join(parts[:len(parts) - 1 - parts[::-1].index("projects")])
        import glob
        found = glob.glob(os.path.join(glob.escape(cursor_dir), "chats", "*", glob.escape(sid), "store.db"))
        return sorted(found)[0] if found else None

    # -- Cursor CLI store.db --------------------------------------------------------------------------

    @staticmethod
    def _meta(con):
        row = con.execute("SELECT value FROM meta WHERE key='0'").fetchone()
        if not row:
            return None
        value = row[0]
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).decode("latin-1")
        if not isinstance(value, str):
            return None
        try:
            value = bytes.fromhex(value.strip()).decode("utf-8")   # hex-encoded JSON
        except ValueError:
            pass   # plain JSON in some versions
        meta = _json_value(value)
        return meta if isinstance(meta, dict) else None

    @staticmethod
    def _blob(con, ref):
        """A blob's bytes by its id (32 raw bytes, as protobuf fields name blobs, or hex text)."""
        if isinstance(ref, (bytes, bytearray)):
            if len(ref) != 32:
                return None
            ref = ref.hex()
        if not isinstance(ref, str) or not ref:
            return None
        row = con.execute("SELECT data FROM blobs WHERE id = ?", (ref.lower(),)).fetchone()
        data = row[0] if row else None
        if isinstance(data, str):
            return data.encode("utf-8")
        return bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else None

    def _referenced(self, con, ref):
        """A protobuf message a field names by blob id (32 bytes), or holds inline; None when the blob
        is not stored (a missing blob's id would decode as a message of noise)."""
        data = self._blob(con, ref)
        if data is None and isinstance(ref, bytes) and len(ref) == 32:
            return None
        return ProtoMessage.parse(data if data is not None else ref)

    def _parse_store(self, con, path, report):
        meta = self._meta(con)
        if meta is None:
            raise NotASessionFile("store.db without readable meta")
        folder = os.path.dirname(os.path.abspath(path))
        side = _read_json(os.path.join(folder, "meta.json")) or {}   # the CLI's plain-JSON copy, with the cwd
        sid = meta.get("agentId") if isinstance(meta.get("agentId"), str) else os.path.basename(folder)
        s = Session(self.id, sid, path)
        s.name = self._name(meta.get("name")) or self._name(side.get("title"))
        s.cwd = _str(side.get("cwd"))
        state = ProtoMessage.parse(self._blob(con, meta.get("latestRootBlobId")))
        if state is not None and state.all(8):
            for ref in state.all(1):   # the prompt's JSON messages: system prompt and injected context
                m = _json_value(self._blob(con, ref))
                if s.cwd is None and isinstance(m, dict) and m.get("role") == "user":
                    hit = _CURSOR_WORKSPACE.search(text_of(m.get("content")))
                    s.cwd = hit.group(1).strip() if hit else None
            for ref in state.all(8):
                self._store_turn(s, con, ref, report)
        if not s.chunks:   # no turns (older stores), or none of their blobs at hand: the JSON messages
            if state is not None and state.all(1):   # the conversation as JSON messages, in root order
                messages = (self._blob(con, ref) for ref in state.all(1))
            else:   # no root: JSON blobs in the order they were written (rowid); the rest are tree nodes
                messages = (d for (d,) in con.execute(
                    "SELECT data FROM blobs WHERE hex(substr(data, 1, 1)) = '7B' ORDER BY rowid"))
            calls = []
            for data in messages:
                m = _json_value(data)
                if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                    continue
                role = self.record_type(report, m, key="role", family="role ")
                if role == "tool":
                    self._blocks(s, "user", m.get("content"), calls, report=report)
                elif role in ("user", "assistant"):
                    self._blocks(s, role, m.get("content"), calls, report=report)
                # system: the agent's system prompt, identical in every chat: not indexed
        wal = path + "-wal"
        s.touch(max(file_mtime_iso(path), file_mtime_iso(wal) if os.path.exists(wal) else ""))
        s.touch(norm_time(side.get("updatedAtMs") or side.get("updatedAt")))
        created = norm_time(meta.get("createdAt")) or norm_time(side.get("createdAtMs") or side.get("createdAt"))
        if created and created < s.created:
            s.created = created
        return s

    def _store_turn(self, s, con, ref, report):
        """One agent.v1.ConversationTurnStructure: 1 an agent turn {1 user message, 2 steps} (blob ids),
        2 a shell turn {1 ShellCommand{1 command}, 2 ShellOutput{1 stdout, 2 stderr, 3 exit code}}."""
        turn = self._referenced(con, ref)
        if turn is None:
            report.skip("unreadable turn")
            return
        if 1 in turn.fields:
            agent = turn.message(1)
            if agent is None:
                report.skip("unreadable turn")
                return
            user = self._referenced(con, agent.get(1)) if agent.get(1) is not None else None
            if user is not None:
                text = user.text(1) or (self._blob(con, user.get(18)) or b"").decode("utf-8", "replace")
                ts = norm_time(user.get(25))
                s.touch(ts)
                self._user_text(s, text, ts)
            for step_ref in agent.all(2):
                step = self._referenced(con, step_ref)
                if step is None:
                    report.skip("unreadable step")
                else:
                    self._store_step(s, con, step, report)
        elif 2 in turn.fields:
            shell = turn.message(2)
            command = self._referenced(con, shell.get(1)) if shell is not None and shell.get(1) else None
            output = self._referenced(con, shell.get(2)) if shell is not None and shell.get(2) else None
            if command is not None:
                out = "\n".join(t for t in (output.text(1), output.text(2)) if t) if output is not None else ""
                failed = output is not None and (output.get(3) or 0) != 0
                s.add("tool", tool_text("shell", {"command": command.text(1)}, out, failed), role="user", tool="shell")
        else:
            report.unrecognized("store turn %s" % ",".join(map(str, sorted(turn.fields))))

    def _store_step(self, s, con, step, report):
        """One agent.v1.ConversationStep: 1 assistant {1 text, 2 started ms}, 2 a tool call,
        3 thinking {1 text, 3 started ms}."""
        if 1 in step.fields or 3 in step.fields:
            kind = "assistant" if 1 in step.fields else "thinking"
            m = step.message(1 if kind == "assistant" else 3)
            if m is None:
                report.skip("unreadable step")
                return
            ts = norm_time(m.get(2 if kind == "assistant" else 3))
            s.touch(ts)
            s.add(kind, m.text(1) or "", role="assistant", ts=ts)
        elif 2 in step.fields:
            call = step.message(2)
            if call is not None:
                self._store_tool(s, con, call, report)
        else:
            report.unrecognized("store step %s" % ",".join(map(str, sorted(step.fields))))

    def _store_tool(self, s, con, call, report):
        """An agent.v1.ToolCall: the tool's own message {1 args, 2 result}, whose result is a oneof in
        which field 1 is success and every other field a way to fail."""
        tools = [n for n in call.fields if n not in _CURSOR_TOOL_META]
        if not tools:
            return
        number = tools[0]
        name = _CURSOR_TOOLS.get(number) or "tool_%d" % number
        if number not in _CURSOR_TOOLS:
            report.unrecognized("store tool %d" % number)
        tool = call.message(number)
        if tool is None:
            return
        if name == "truncated":   # Cursor shortened the call: the original step may still be stored
            original = self._referenced(con, tool.get(1)) if tool.get(1) else None
            if original is not None and 2 in original.fields and original.message(2) is not None \
                    and 34 not in original.message(2).fields:
                self._store_tool(s, con, original.message(2), report)
            return
        ts = norm_time(call.get(59))
        s.touch(ts)
        args_msg = tool.message(1)
        names = _CURSOR_TOOL_ARGS.get(name)
        if args_msg is None:
            args = None
        elif names:
            args = {key: args_msg.text(n) for n, key in names.items() if args_msg.text(n)}
            if name == "mcp":   # the MCP tool's own arguments: a map of google.protobuf.Value
                extra = [t for e in args_msg.all(2) for t in (ProtoMessage.parse(e) or ProtoMessage(b"")).strings()]
                if extra:
                    args["arguments"] = " ".join(extra)
        else:
            args = {"input": "\n".join(args_msg.strings())}
        output, failed = self._store_result(con, name, tool.message(2))
        s.add("tool", tool_text(name, args, output, failed), role="assistant", tool=name, path=tool_path(args), ts=ts)

    def _store_result(self, con, name, result):
        """(text, failed) of a tool's result message."""
        if result is None:
            return "", False
        outcome = [n for n in result.fields if n < 100]   # 101+: the shell's sandbox, pid...
        if not outcome:
            return "", False
        number = outcome[0]
        body = result.message(number)
        failed = number != 1
        if body is None:
            return "", failed
        if name == "shell":   # success and failure alike: 3 exit code, 5 stdout, 6 stderr
            failed = failed or bool(body.get(3))
            text = "\n".join(t for t in (body.text(5), body.text(6)) if t)
            if not text:   # only the head and tail of a long output, or the interleaved output
                text = "\n".join(t for n in (15, 16, 13, 14, 10, 9) for t in [body.text(n)] if t)
            return text, failed
        if name == "read" and number == 1:
            text = body.text(1)
            if not text and body.get(10):
                text = (self._blob(con, body.get(10)) or b"").decode("utf-8", "replace")
            return text or "", False
        if name == "edit" and number == 1:
            return "\n".join(t for t in (body.text(8), body.text(5)) if t), False
        return "\n".join(body.strings()), failed

    # -- the editor's state.vscdb ---------------------------------------------------------------------

    def _parse_vscdb(self, con, path, report):
        sessions, workspaces = [], None
        composers = con.execute("SELECT key, value FROM cursorDiskKV WHERE key >= 'composerData:' "
                                "AND key < 'composerData;'").fetchall()
        for key, value in composers:
            data = _json_value(value)
            if not isinstance(data, dict):
                report.skip("malformed composer record")
                continue
            cid = data.get("composerId") if isinstance(data.get("composerId"), str) else key.split(":", 1)[1]
            s = Session(self.id, cid, path)
            s.name = self._name(data.get("name"))
            s.created, s.modified = norm_time(data.get("createdAt")), norm_time(data.get("lastUpdatedAt"))
            calls = []
            for bubble in self._bubbles(con, cid, data, report):
                self._bubble(s, bubble, calls, report)
            if not s.chunks and not s.name:
                continue   # an empty draft the editor opened and never used
            if s.cwd is None:
                if workspaces is None:
                    workspaces = self._workspace_folders(path)
                s.cwd = workspaces.get(cid)
            if s.created is None:
                s.created = s.modified or file_mtime_iso(path)
            if s.modified is None or s.modified < s.created:
                s.modified = s.created
            sessions.append(s)
        return sessions

    @staticmethod
    def _bubbles(con, cid, data, report):
        """The composer's bubbles in conversation order: the header list (v0.40+) names them, their
        bodies are separate keys; older composers keep them inline in `conversation`."""
        headers = data.get("fullConversationHeadersOnly")
        if isinstance(headers, list) and headers:
            inline = data.get("conversationMap") if isinstance(data.get("conversationMap"), dict) else {}
            prefix = "bubbleId:%s:" % cid
            stored = {}
            # A key-range scan uses the key index: the table can hold gigabytes of other chats.
            for key, value in con.execute("SELECT key, value FROM cursorDiskKV WHERE key >= ? AND key < ?",
                                          (prefix, "bubbleId:%s;" % cid)):
                stored[key[len(prefix):]] = value
            out = []
            for h in headers:
                bid = h.get("bubbleId") if isinstance(h, dict) else None
                b = inline.get(bid) if bid in inline else _json_value(stored.get(bid))
                if isinstance(b, dict):
                    out.append(b)
                elif bid in stored:
                    report.skip("malformed bubble")
            return out
        conv = data.get("conversation")
        return [b for b in conv if isinstance(b, dict)] if isinstance(conv, list) else []

    def _bubble(self, s, b, calls, report=None):
        timing = b.get("timingInfo") if isinstance(b.get("timingInfo"), dict) else {}
        ts = norm_time(b.get("createdAt") or timing.get("clientStartTime"))
        s.touch(ts)
        if s.cwd is None and isinstance(b.get("workspaceProjectDir"), str) and b["workspaceProjectDir"]:
            s.cwd = b["workspaceProjectDir"]
        text = b.get("text") if isinstance(b.get("text"), str) else ""
        if b.get("type") == 1:
            self._user_text(s, text, ts)
            return
        if b.get("type") != 2:
            if report is not None:
                report.unrecognized("bubble type %s" % b.get("type"))
            return
        thinking = b.get("thinking")
        if isinstance(thinking, dict):
            thinking = thinking.get("text")
        s.add("thinking", thinking if isinstance(thinking, str) else "", role="assistant", ts=ts)
        s.add("assistant", text, role="assistant", ts=ts)
        tool = b.get("toolFormerData")
        if isinstance(tool, dict) and (tool.get("name") or tool.get("rawArgs")):
            name = str(tool.get("name") or "tool")
            args = tool.get("rawArgs") if tool.get("rawArgs") is not None else tool.get("params")
            if isinstance(args, str):
                args = _json_value(args) if args.strip().startswith("{") else args
                args = args if args is not None else tool.get("rawArgs")
            output = tool.get("result")
            if output is not None and not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            s.add("tool", tool_text(name, args, output, tool.get("status") == "error"), role="assistant",
                  tool=name, path=tool_path(args), ts=ts)

    @staticmethod
    def _workspace_folders(global_db):
        """composerId -> workspace folder, from workspaceStorage/<hash>/: workspace.json names the folder
        and that workspace's state.vscdb lists its composers (composer.composerData)."""
        folders = {}
        ws_root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(global_db))), "workspaceStorage")
        try:
            entries = sorted(os.scandir(ws_root), key=lambda e: e.name)
        except OSError:
            return folders
        for e in entries:
            wj, db = os.path.join(e.path, "workspace.json"), os.path.join(e.path, "state.vscdb")
            if not (os.path.isfile(wj) and os.path.isfile(db)):
                continue
            try:
                ws = _load_json_file(wj)
            except OSError:
                continue
            uri = ws.get("folder") if isinstance(ws, dict) else None
            if not isinstance(uri, str):
                continue
            if "://" in uri:
                from urllib.parse import unquote, urlparse
                uri = unquote(urlparse(uri).path)
            folder = uri
            if re.match(r"^/[A-Za-z]:", folder):   # file:///c%3A/Users/... on Windows
                folder = folder[1:]
            try:
                con = open_agent_db(db)
            except (OSError, NotASessionFile):
                continue
            try:
                row = con.execute("SELECT value FROM ItemTable WHERE key='composer.composerData'").fetchone()
            except sqlite3.DatabaseError:
                row = None
            finally:
                con.close()
            data = _json_value(row[0]) if row else None
            for c in data.get("allComposers", []) if isinstance(data, dict) else []:
                if isinstance(c, dict) and isinstance(c.get("composerId"), str):
                    folders.setdefault(c["composerId"], folder)
        return folders

    def resume_command(self, row):
        # The CLI's chats (store.db, agent transcripts): `agent --resume <chatId>` (the binary was
        # cursor-agent), among the chats of the current folder. Editor composers have no command.
        path, sid = row.get("path") or "", row.get("session_id")
        if not sid or path.endswith(".vscdb") or os.sep + "subagents" + os.sep in path:
            return None
        cmd = "agent --resume %s" % shell_quote(sid)
        return "cd %s && %s" % (shell_quote(row["cwd"]), cmd) if row.get("cwd") else cmd


# -------------------------------------------------------------------------------------------------
# Aider (Aider-AI/aider): <repo>/.aider.chat.history.md, one Markdown file per repo
# -------------------------------------------------------------------------------------------------

AIDER_START_RE = LazyPattern(r"^# aider chat started at (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")
AIDER_THINKING_RE = LazyPattern(r"<thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>(.*?)"
                               r"(?:</thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>|\Z)", re.S)
AIDER_EDIT_RE = LazyPattern(r"^Applied edit to (.+)$", re.M)
# A shell command the user ran (`/run cmd`, `!cmd`), or one the model suggested that aider ran
# ("Running cmd" among aider's own lines). Its output goes to the terminal and the chat, but the
# history file only keeps aider's lines about it ("Added 2 lines of output to the chat.").
AIDER_RUN_RE = LazyPattern(r"^(?:/run\s+|!)(\S.*)$", re.S)
AIDER_RUNNING_RE = LazyPattern(r"^Running (\S.*)$")
# prompt_toolkit's history beside the chat history: "# <local time>" then "+<line>" per prompt typed.
AIDER_INPUT_TIME_RE = LazyPattern(r"^# (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\s*$")


@register
class AiderParser(Parser):
    """Aider chat histories (`.aider.chat.history.md`), many sessions per file.

    Every run of aider appends `# aider chat started at <local time>`; that header starts a session.
    `#### ` lines are what the user typed (a multi-line prompt is several such lines), `> ` lines are
    aider's own output (command output, confirmations, "Applied edit to ..."), everything else is the
    model's reply, with reasoning inside a fixed `<thinking-content-...>` tag. Aider keeps no session
    ids, so a session's id is a hash of the file's path and its start time; runs that produced no
    conversation (a banner and ^C) are left out. Aider has no global store: the files sit at each
    repo's root, so it is found only under configured folders.
    """

    id, label, version = "aider", "Aider", 3
    verified = "0.86.2, 2026-11-25"
    records = ()   # Markdown: no typed records to count

    # No global location: Aider writes into each repository (configure folders holding repos).
    # `.aider.input.history` (prompt_toolkit's recall list) is not a transcript. A file named by
    # --chat-history-file / AIDER_CHAT_HISTORY_FILE can be configured as a root itself.
    project_files = ("*.aider.chat.history.md",)

    def parse(self, path, report):
        if b"# aider chat started at " not in read_head(path, 65536):
            raise NotASessionFile("no '# aider chat started at' header")
        abspath = os.path.abspath(path)
        sessions, seen_ids = [], {}
        current = None
        with open_regular(path, text=True) as f:
            for line in f:
                line = line.rstrip("\r\n")
                m = AIDER_START_RE.match(line)
                if m:
                    if current:
                        sessions.append(current.finish())
                    start = m.group(1)
                    key = "%s#%s" % (abspath, start)
                    seen_ids[key] = seen_ids.get(key, 0) + 1
                    if seen_ids[key] > 1:  # two runs started in the same second
                        key += "#%d" % seen_ids[key]
                    import hashlib
                    current = _AiderSession(self.id, hashlib.sha1(key.encode("utf-8")).hexdigest()[:32], path,
                                            norm_time(start))
                elif current:
                    if line.startswith("> Aider v"):   # the start-up banner: "> Aider v0.85.2"
                        report.saw_version(line[len("> Aider v"):].strip().partition(" ")[0])
                    current.line(line)
        if current:
            sessions.append(current.finish())
        dated = self._input_times(path, sessions)
        if sessions and sessions[-1].created and sessions[-1] not in dated:
            # Only the last session can have gone on after its start: the file was last written then.
            # (Not when its prompts are dated: the file's time is also when a clone or a copy of the
            # repository wrote it, which would make every cloned session "modified today".)
            sessions[-1].modified = max(sessions[-1].created, file_mtime_iso(path))
        # Aider writes no cwd. It writes "Cur working dir:" when launched below the repo root;
        # otherwise it was launched at the repo root, which is where it writes this file.
        for s in sessions:
            s.cwd = s.cwd or os.path.dirname(abspath)
        return [s for s in sessions if any(c.kind in ("user", "assistant") for c in s.chunks)]

    @staticmethod
    def _input_times(path, sessions):
        """The chat history has no times but each run's start: a session that is no longer the last
        one in its file would fall back to its start time, and every chunk has that time. The input
        history beside it (`.aider.input.history`, "# <local time>" then "+<line>" per prompt typed)
        dates the prompts: each prompt (and what follows it) gets its time, and the last one before
        the next run started is when the session was last active. Returns the sessions it dated."""
        prompts, dated = [], []   # (time, first line of the prompt)
        try:
            with open_regular(os.path.join(os.path.dirname(os.path.abspath(path)), ".aider.input.history"),
                              text=True) as f:
                t = None
                for line in f:
                    if line.startswith("# "):
                        m = AIDER_INPUT_TIME_RE.match(line)
                        t = norm_time(m.group(1)) if m else None
                    elif line.startswith("+") and t:
                        prompts.append((t, line[1:].strip()))
                        t = None   # later lines of a multi-line prompt
        except OSError:
            return dated
        prompts.sort(key=lambda p: p[0])
        for s, after in zip(sessions, sessions[1:] + [None]):
            if not s.created:
                continue
            end = after.created if after is not None and after.created else None
            mine = [p for p in prompts if p[0] >= s.created and (end is None or p[0] < end)]
            if not mine:
                continue
            s.touch(mine[-1][0])
            dated.append(s)
            i, ts = 0, None
            for c in s.chunks:
                if c.kind == "user":
                    first = c.text.split("\n", 1)[0].strip()
                    j = next((k for k in range(i, len(mine)) if mine[k][1] == first), None)
                    if j is not None:
                        ts, i = mine[j][0], j + 1
                if ts:
                    c.ts = ts
        return dated


class _AiderSession:
    """Turns the lines of one aider run into chunks: consecutive lines of one kind form one chunk."""

    def __init__(self, agent, session_id, path, start):
        self.s = Session(agent, session_id, path)
        self.s.created = self.s.modified = start
        self.kind, self.buf = None, []
        self.in_fence = False
        self.talked = False       # before the first prompt, `>` lines are aider's start-up banner
        self.command = None       # the /command whose output the next `>` block is
        self.run = None           # the arguments of the shell command that /run or ! just ran

    def line(self, line):
        if self.kind == "assistant" and self.in_fence:
            kind = "assistant"    # a fenced block in a reply may hold `> ` or `#### ` lines
        elif line.startswith("#### ") or line.rstrip() == "####":
            kind = "user"
        elif line.startswith("> ") or line.rstrip() == ">":
            kind = "output"
        elif not line.strip():
            if self.kind == "assistant":
                self.buf.append("")
            return
        else:
            kind = "assistant"
        if kind != self.kind:
            self.flush()
            self.kind = kind
        if kind == "user":
            self.buf.append(line[5:].rstrip())
        elif kind == "output":
            text = line[2:].rstrip()
            m = re.match(r"Cur working dir: (.+)$", text)
            if m and not self.s.cwd:
                self.s.cwd = m.group(1).strip()
            self.buf.append(text)
        else:
            if line.lstrip().startswith("```"):
                self.in_fence = not self.in_fence
            self.buf.append(line.rstrip())

    def flush(self):
        text = "\n".join(self.buf).strip()
        kind, self.buf, self.in_fence = self.kind, [], False
        if not text:
            return
        s, ts = self.s, self.s.created
        if kind == "user":
            s.add("user", text, role="user", ts=ts)
            self.talked = True
            self.command = text.split()[0][1:] if text.startswith("/") and len(text) > 1 else None
            self.run = None
            run = AIDER_RUN_RE.match(text)
            if run:   # a shell command: a tool call of its own, its output (if any) follows as `>` lines
                self.run = {"command": run.group(1).strip()}
                s.add("tool", tool_text("run", self.run), role="user", tool="run", ts=ts)
        elif kind == "output":
            if not self.talked:
                s.add("context", text, role="system", ts=ts)
            elif self.run and s.chunks and s.chunks[-1].tool == "run":
                s.chunks[-1].text = tool_text("run", self.run, text)
                self.run = self.command = None
            else:
                self._output(text)
        else:
            thinking = "\n".join(t.strip() for t in AIDER_THINKING_RE.findall(text))
            s.add("thinking", thinking, role="assistant", ts=ts)
            s.add("assistant", AIDER_THINKING_RE.sub("", text), role="assistant", ts=ts)

    def _output(self, text):
        """aider's own lines after a prompt or a reply; "Running cmd" starts a shell call it made."""
        s, ts = self.s, self.s.created
        blocks, current = [], []
        for line in text.split("\n"):
            if AIDER_RUNNING_RE.match(line) and current is not None:
                blocks.append(current)
                current = [line]
            else:
                current.append(line)
        blocks.append(current)
        for i, lines in enumerate(blocks):
            block = "\n".join(lines).strip()
            if not block:
                continue
            running = AIDER_RUNNING_RE.match(lines[0]) if i else None
            if running:
                s.add("tool", tool_text("run", {"command": running.group(1).strip()}, "\n".join(lines[1:]).strip()),
                      role="tool", tool="run", ts=ts)
                continue
            name = self.command or "aider"
            args = {"command": s.chunks[-1].text} if self.command and s.chunks else None
            edit = AIDER_EDIT_RE.search(block)
            s.add("tool", tool_text(name, args, block), role="tool", tool=name,
                  path=edit.group(1).strip() if edit else None, ts=ts)
        self.command = None

    def finish(self):
        self.flush()
        return self.s


# -------------------------------------------------------------------------------------------------
# SpecStory (specstoryai): <project>/.specstory/history/<time>-<slug>.md, exports of Cursor, Claude Code...
# -------------------------------------------------------------------------------------------------

# A turn starts with `_**User**_`, `_**Assistant**_` (2025 exports), or with a model and a time
# `_**User (2026-07-13 13:40:49Z)**_`, `_**Agent (claude-opus-4-8 2026-07-13 13:40:56Z)**_`
# (" - sidechain" marks a sub-agent's turn, kept with the session that ran it).
SPECSTORY_TURN_RE = LazyPattern(r"^_\*\*(User|Assistant|Agent)\b[^(*]*(?:\((.*)\))?\*\*_\s*$")
SPECSTORY_TIME_RE = LazyPattern(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?Z?")
SPECSTORY_TITLE_RE = LazyPattern(r"^# (.*?)\s*(?:\((\d{4}-\d\d-\d\d[^)]*)\))?\s*$")
SPECSTORY_FILE_TIME_RE = LazyPattern(r"^(\d{4}-\d\d-\d\d)_(\d\d)-(\d\d)(?:-(\d\d))?Z?")
# Inside a turn: the model's reasoning, a tool use (name and kind in attributes, a <summary> saying
# what it did, then its output), and in older exports a bare <details> block (a listing, a search).
SPECSTORY_BLOCK_RE = LazyPattern(r"<think>(.*?)</think>|<tool-use\b([^>]*)>(.*?)</tool-use>|<details>(.*?)</details>",
                                 re.S)
SPECSTORY_SUMMARY_RE = LazyPattern(r"^\s*(?:<details>)?\s*<summary>(.*?)</summary>(.*?)(?:</details>\s*)?$", re.S)


@register
class SpecStoryParser(Parser):
    """SpecStory exports: one Markdown file per conversation, written into the project it was held in.

    The extension (Cursor, VS Code Copilot) and the CLI (wrapping Claude Code, Codex, Gemini...) save
    each conversation as `.specstory/history/<UTC time>-<slug>.md`: `<!-- Generated by SpecStory -->`,
    `# <title> (<time>)`, then turns under `_**User**_` / `_**Assistant**_` / `_**Agent**_` headers
    (newer exports put the model and the time in the header), pieces of a turn separated by `---`
    lines. The model's reasoning is a `<think>` block and tool calls `<tool-use data-tool-name=...>`
    blocks (older exports: bare `<details>` blocks). Like Aider's files they sit inside projects, so
    they are found under configured folders only; the cwd is the project the file is in.
    """

    id, label, version = "specstory", "SpecStory", 2
    records = ()   # Markdown turns: no record types to drift

    # No global location: SpecStory writes into each project (configure folders holding projects).
    project_files = (".specstory/history/*.md",)

    def parse(self, path, report):
        head = read_head(path, 65536)
        if b"Generated by SpecStory" not in head and not re.search(rb"(?m)^_\*\*User\b", head):
            raise NotASessionFile("no SpecStory header or _**User**_ turn")
        abspath = os.path.abspath(path)
        import hashlib   # no ids in the file (the agent's own id only in newer ones): its path is the id
        s = Session(self.id, hashlib.sha1(abspath.encode("utf-8")).hexdigest()[:32], path)
        parts = abspath.split(os.sep)
        s.cwd = os.sep.join(parts[:-3]) if parts[-3:-1] == [".specstory", "history"] else os.path.dirname(abspath)
        # The file name's time is UTC (newer names end in Z); the title's time in older exports is the
        # user's local time without a zone (a 2025 export: name 21-16, title 18:16:34): the name wins.
        m = SPECSTORY_FILE_TIME_RE.match(os.path.basename(path))
        start = norm_time("%s %s:%s:%sZ" % (m.group(1), m.group(2), m.group(3), m.group(4) or "00")) if m else None
        role, ts, lines, fence = None, None, [], None
        with open_regular(path, text=True) as f:
            for line in f:
                line = line.rstrip("\r\n")
                # A turn header is one wherever it is: a prompt with an unclosed ``` (pasted code
                # often has one) must not swallow the turns after it. A `---` inside a fence is code.
                turn = SPECSTORY_TURN_RE.match(line) if line.startswith("_**") else None
                marker = line.lstrip()[:3]
                if fence and not turn:
                    lines.append(line)
                    if marker == fence and not line.strip().strip(fence[0]):
                        fence = None
                    continue
                if marker in ("```", "~~~"):
                    fence = marker
                    lines.append(line)
                    continue
                if turn or line.strip() == "---":
                    fence = None
                    self._piece(s, role, "\n".join(lines), ts or start)
                    lines = []
                    if turn:
                        role = "user" if turn.group(1) == "User" else "assistant"
                        when = SPECSTORY_TIME_RE.search(turn.group(2) or "")
                        ts = norm_time(when.group(0)) if when else ts
                        s.touch(ts)
                    continue
                if role is None:   # the file's header: the title (or just a time, in newer exports)
                    title = SPECSTORY_TITLE_RE.match(line)
                    if title and not s.name:
                        s.name = title.group(1) if not SPECSTORY_TIME_RE.fullmatch(title.group(1)) else None
                        start = start or norm_time(title.group(2))
                    continue
                lines.append(line)
        self._piece(s, role, "\n".join(lines), ts or start)
        if not any(c.kind == "user" for c in s.chunks):
            raise NotASessionFile("no user turn")
        s.touch(start)
        if s.modified == start:   # no turn times (older exports): SpecStory rewrites the file as the chat goes on
            s.touch(max(start, file_mtime_iso(path)) if start else None)
        _finish_times(s, path)
        return [s]

    @staticmethod
    def _piece(s, role, text, ts):
        """One `---`-separated piece of a turn: its text, reasoning and tool uses in their order."""
        if role is None or not text.strip():
            return
        at = 0
        for m in SPECSTORY_BLOCK_RE.finditer(text):
            s.add(role, text[at:m.start()], role=role, ts=ts)
            at = m.end()
            think, attrs, use, details = m.groups()
            if think is not None:
                inner = SPECSTORY_SUMMARY_RE.match(think)
                s.add("thinking", inner.group(2) if inner else think, role="assistant", ts=ts)
                continue
            name = re.search(r'data-tool-name="([^"]*)"', attrs or "")
            name = name.group(1) if name and name.group(1) else "tool"
            inner = SPECSTORY_SUMMARY_RE.match(use if use is not None else details)
            summary, output = (inner.group(1), inner.group(2)) if inner else ("", use or details)
            # "Tool use: **read_file** • Read file: src/app.py": what it did, without the name again
            summary = re.sub(r"^Tool use: \*\*[^*]*\*\*\s*(?:•\s*)?", "", summary.strip())
            path = re.search(r"\bfile: `?([^`•\n]+?)`?\s*(?:•|$)", summary)
            s.add("tool", tool_text(name, {"summary": summary} if summary else None, output.strip()), role=role,
                  tool=name, path=path.group(1) if path else None, ts=ts)
        s.add(role, text[at:], role=role, ts=ts)


# -------------------------------------------------------------------------------------------------
# Cline / Roo Code / Kilo Code (cline/cline, RooCodeInc/Roo-Code): globalStorage/<extension>/tasks/<taskId>/, ~/.cline/data
# -------------------------------------------------------------------------------------------------

CLINE_EXTENSIONS = ("saoudrizwan.claude-dev", "rooveterinaryinc.roo-cline", "kilocode.kilo-code")
# The Cline SDK (CLI 3.x) wraps what the user typed: <user_input mode="act">...</user_input>.
CLINE_USER_INPUT_RE = LazyPattern(r"<user_input(?:\s[^>]*)?>(.*?)</user_input>", re.S)
# The environment block each request carries names the workspace (Cline: "Working", Roo: "Workspace").
CLINE_CWD_RE = LazyPattern(r"# Current (?:Working|Workspace) Directory \((.+?)\) Files")
CLINE_TASK_RE = LazyPattern(r"<task>\s*(.*?)\s*</task>", re.S)
CLINE_INJECTED_RE = LazyPattern(r"<environment_details>.*?(?:</environment_details>|\Z)", re.S)


@register
class ClineParser(Parser):
    """Cline, Roo Code and Kilo Code tasks (the three share one design): one folder per task.

    `ui_messages.json` is what the user saw, one record per message with a ms timestamp: the task
    and later feedback the user typed, the model's text and reasoning, tool uses (JSON), commands and
    their output. It is indexed in preference to `api_conversation_history.json`, whose user turns
    are wrapped in `<task>` tags with an `<environment_details>` block appended to every request; that
    file is read only when a task has no ui_messages.json, and for the cwd. The title Cline shows is
    the first prompt, so the name is left unset. Roo records a sub-task's parent in history_item.json.

    The Cline SDK (Cline CLI 3.x, 2026) keeps a session in ~/.cline/data/sessions/<id>/: `<id>.messages.json`
    `{sessionId, origin: {version}, messages: [{role, content: [Anthropic-style blocks], ts}]}` and the
    manifest `<id>.json` (cwd, started_at, ended_at, parent_session_id, metadata.title). The same
    session is listed in data/db/sessions.db, which adds nothing to search; the SDK writes both files
    in place (writeFileSync: the folder's time stays), but updates the session's row in that
    database (WAL) at every turn: its change marks a start (see start_mark).
    """

    id, label, version = "cline", "Cline / Roo Code / Kilo Code", 4
    verified = "3.0.65, 2026-11-24"   # the Cline CLI (SDK layout)
    # ui_messages records by their `say` or `ask` type; blocks of the API history and the SDK messages.
    records = ("task", "user_feedback", "text", "completion_result", "followup", "plan_mode_respond",
               "act_mode_respond", "qna_respond", "reasoning", "command", "tool", "use_mcp_server",
               "browser_action_launch", "browser_action", "command_output", "mcp_server_response", "condense",
               "condense_context", "compaction", "error", "api_req_failed", "mistake_limit_reached", "diff_error",
               "api_req_started")
    blocks = ("text", "thinking", "reasoning", "tool_use", "tool_result")
    skipped_blocks = ("image", "document", "file", "redacted_thinking")
    # ui_messages records (say or ask types) with nothing to search: progress, costs, retries, checkpoints,
    # approvals, hooks, screenshots, state snapshots (Cline, Roo Code and Kilo Code alike).
    skipped_records = frozenset({
        "api_req_finished", "api_req_retried", "api_req_retry_delayed", "api_req_rate_limit_wait",
        "api_req_deleted", "deleted_api_reqs", "error_retry", "image", "checkpoint_created", "checkpoint_saved",
        "shell_integration_warning", "shell_integration_warning_with_suggestion", "browser_action_result",
        "mcp_server_request_started", "mcp_notification", "load_mcp_documentation", "info", "task_progress",
        "hook_status", "hook_output_stream", "subagent", "use_subagents", "subagent_usage",
        "conditional_rules_applied", "partial_tool_result", "state_snapshot", "clineignore_error",
        "rooignore_error", "command_permission_denied", "user_feedback_diff", "generate_explanation",
        "condense_context_error", "sliding_window_truncation", "codebase_search_result", "user_edit_todos",
        "too_many_tools_warning", "subtask_result", "inspect_site_result", "payment_required_prompt",
        "resume_task", "resume_completed_task", "auto_approval_max_req_reached", "new_task", "spawn_task",
        "condense", "change_todo_list", "summarize_task", "report_bug", "status_acknowledgment",
        "generate_report", "make_plan"})

    def default_roots(self, env):
        roots = []
        for storage in vscode_global_storage(env):
            for ext in CLINE_EXTENSIONS:
                d = os.path.join(storage, ext, "tasks")
                if root_isdir(env, d):
                    roots.append(d)
        # The Cline CLI / JetBrains plugin keep the same task folders in their own data dir.
        data = env_path(env, "CLINE_DATA_DIR") or (
            os.path.join(env_path(env, "CLINE_DIR"), "data") if env.get("CLINE_DIR")
            else os.path.join(_home(env), ".cline", "data"))
        if root_isdir(env, os.path.join(data, "tasks")):
            roots.append(os.path.join(data, "tasks"))
        sdk = env_path(env, "CLINE_SESSION_DATA_DIR") or os.path.join(data, "sessions")
        if root_isdir(env, sdk):
            roots.append(sdk)
        return roots or [os.path.join(_primary_global_storage(env), CLINE_EXTENSIONS[0], "tasks")]

    def list_files(self, root):
        # One file per task folder: ui_messages.json, else the API history (older or broken tasks);
        # one <id>.messages.json per SDK session folder.
        files = walk_files(root, lambda n: n in ("ui_messages.json", "api_conversation_history.json")
                           or n.endswith(".messages.json"), max_depth=2)
        chosen = {}
        for f in files:
            d = os.path.dirname(f)
            if os.path.basename(f) != "api_conversation_history.json" or d not in chosen:
                chosen[d] = f
        return sorted(chosen.values())

    def start_mark(self, root):
        # The SDK's index database (`sessions.db`, status and updated_at set at every turn), when the
        # root is the SDK's sessions folder or the task folder beside it (sdk/packages/core/src/session:
        # a resumed session's messages are rewritten in place, at Cline 4.1.13).
        db = os.path.join(os.path.dirname(root.rstrip(os.sep)), "db", "sessions.db")
        return db if os.path.isfile(db) else None

    def sidecars(self, path):
        # The SDK's manifest beside the messages gets the end time and the title.
        if path.endswith(".messages.json"):
            return [path[:-len(".messages.json")] + ".json"]
        return []

    def parse(self, path, report):
        folder = os.path.dirname(os.path.abspath(path))
        base = os.path.basename(path)
        if base.endswith(".messages.json"):
            return [self._sdk_session(path, report)]
        data = _load_json_file(path)
        if not isinstance(data, list):
            raise NotASessionFile("not a JSON list of task messages")
        s = Session(self.id, os.path.basename(folder), path)
        api_path = os.path.join(folder, "api_conversation_history.json")
        if base == "api_conversation_history.json":
            self._api_history(s, data, report)
        elif data and not all(isinstance(m, dict) and "ts" in m and ("say" in m or "ask" in m) for m in data[:5]):
            raise NotASessionFile("not Cline ui_messages records")
        else:
            self._ui_messages(s, data, report)
        item = os.path.join(folder, "history_item.json")   # Roo Code: the task's index entry
        if os.path.isfile(item):
            meta = _load_json_file(item)
            if isinstance(meta, dict):
                s.parent = meta.get("parentTaskId") or None
                if isinstance(meta.get("workspace"), str) and meta["workspace"] and not s.cwd:
                    s.cwd = meta["workspace"]
        if not s.cwd and base != "api_conversation_history.json" and os.path.isfile(api_path):
            api = _load_json_file(api_path)
            if isinstance(api, list):
                s.cwd = self._cwd_in_api(api)
        _finish_times(s, path)
        return [s]

    @staticmethod
    def _cwd_in_api(messages):
        for m in messages[:4]:
            if isinstance(m, dict) and m.get("role") == "user":
                for block in m.get("content") if isinstance(m.get("content"), list) else [m.get("content")]:
                    text = block.get("text") if isinstance(block, dict) else block
                    hit = CLINE_CWD_RE.search(text) if isinstance(text, str) else None
                    if hit:
                        return hit.group(1)
        return None

    def _ui_messages(self, s, messages, report):
        tools = ToolCalls(s)
        last_tool = None       # the command / MCP call whose output the next *_output record is
        last_text = None       # Cline repeats a completion as say and then ask: index it once
        requested = False      # whether the model has been asked anything yet (an api_req_started seen)
        for m in messages:
            if not isinstance(m, dict):
                report.skip("malformed message")
                continue
            ts = norm_time(m.get("ts"))
            s.touch(ts)
            what = self.record_type(report, m, *(("say", "say ") if m.get("say") else ("ask", "ask ")))
            text = m.get("text") if isinstance(m.get("text"), str) else ""
            if what in ("task", "user_feedback") or (what == "text" and not requested):
                # Cline and Roo Code open a task with say("text", task, images) (cline/cline
                # src/core/task/index.ts startTask): a text before the first request to the model
                # can only be what the user typed.
                s.add("user", text, role="user", ts=ts)
            elif what in ("text", "completion_result", "followup", "plan_mode_respond", "act_mode_respond", "qna_respond"):
                if what in ("followup", "plan_mode_respond", "act_mode_respond", "qna_respond"):
                    obj = _json_arg(text)
                    if isinstance(obj, dict):
                        text = obj.get("question") or obj.get("response") or ""
                if text and text != last_text:
                    s.add("assistant", text, role="assistant", ts=ts)
                last_text = text or last_text
            elif what == "reasoning":
                s.add("thinking", text or m.get("reasoning") or "", role="assistant", ts=ts)
            elif what in ("command", "tool", "use_mcp_server", "browser_action_launch", "browser_action"):
                if what == "command":
                    name, args = "execute_command", {"command": text}
                else:
                    args = _json_arg(text)
                    name = what
                    if isinstance(args, dict):
                        # {"tool": "readFile", "path": ...}, {"toolName": ..., "arguments": "{...}"}:
                        # the key that names the tool is the name, not one of its arguments.
                        named_by = "tool" if args.get("tool") else "toolName" if args.get("toolName") else None
                        name = args[named_by] if named_by else what
                        args = {k: (_json_arg(v) if k == "arguments" else v) for k, v in args.items() if k != named_by}
                key = "%s\x00%s" % (what, text)
                if key == last_tool:
                    continue   # the approval request (ask) and the record of the run (say)
                tools.call(key, str(name), args, ts=ts)
                last_tool = key
            elif what in ("command_output", "mcp_server_response"):
                if last_tool and text:
                    prev = tools.calls[last_tool]["output"]
                    tools.result(last_tool, (prev + "\n" + text) if prev else text)
            elif what in ("condense", "condense_context", "compaction"):
                summary = (m.get("contextCondense") or {}).get("summary") if isinstance(m.get("contextCondense"), dict) else None
                s.add("summary", summary or text, role="system", ts=ts)
            elif what in ("error", "api_req_failed", "mistake_limit_reached", "diff_error"):
                s.add("context", text, role="system", ts=ts)
            elif what == "api_req_started":
                requested = True
                req = _json_arg(text)
                hit = CLINE_CWD_RE.search(req.get("request") or "") if isinstance(req, dict) and isinstance(req.get("request"), str) else None
                if hit and not s.cwd:
                    s.cwd = hit.group(1)

    def _api_history(self, s, messages, report):
        tools = ToolCalls(s)
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                report.skip("malformed message")
                continue
            ts = norm_time(m.get("ts"))
            s.touch(ts)
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                btype = self.block_type(report, b)
                if btype == "text" and isinstance(b.get("text"), str):
                    text = b["text"]
                    if m["role"] == "assistant":
                        s.add("assistant", text, role="assistant", ts=ts)
                        continue
                    if not s.cwd and CLINE_CWD_RE.search(text):
                        s.cwd = CLINE_CWD_RE.search(text).group(1)
                    task = CLINE_TASK_RE.search(text)
                    if task:   # the user's words inside the injected wrapper
                        s.add("user", task.group(1), role="user", ts=ts)
                        s.add("context", CLINE_INJECTED_RE.sub("", CLINE_TASK_RE.sub("", text)), role="system", ts=ts)
                    else:
                        s.add("context", CLINE_INJECTED_RE.sub("", text), role="system", ts=ts)
                elif btype == "thinking" and isinstance(b.get("thinking"), str):
                    s.add("thinking", b["thinking"], role="assistant", ts=ts)
                elif btype == "tool_use":
                    tools.call(b.get("id"), str(b.get("name") or "tool"), b.get("input"), ts=ts)
                elif btype == "tool_result":
                    tools.result(b.get("tool_use_id"), text_of(b.get("content")), bool(b.get("is_error")), ts=ts)

    # -- Cline SDK sessions ---------------------------------------------------------------------------

    def _sdk_session(self, path, report):
        data = _load_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise NotASessionFile("not a Cline SDK messages file")
        sid = _str(data.get("sessionId")) or os.path.basename(path)[:-len(".messages.json")]
        s = Session(self.id, sid, path)
        manifest = _read_json(path[:-len(".messages.json")] + ".json") or {}
        meta = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
        s.cwd = _str(manifest.get("cwd")) or _str(manifest.get("workspace_root"))
        s.parent = _str(manifest.get("parent_session_id"))
        title = _str(meta.get("title"))
        origin = data.get("origin") if isinstance(data.get("origin"), dict) else {}
        report.saw_version(origin.get("version"))
        tools = ToolCalls(s)
        for m in data["messages"]:
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                report.skip("malformed message")
                continue
            ts = norm_time(m.get("ts") or m.get("createdAt"))
            s.touch(ts)
            content = m.get("content")
            for b in content if isinstance(content, list) else [{"type": "text", "text": content}]:
                if not isinstance(b, dict):
                    continue
                btype = self.block_type(report, b)
                if btype == "text" and isinstance(b.get("text"), str):
                    if m["role"] == "assistant":
                        s.add("assistant", b["text"], role="assistant", ts=ts)
                        continue
                    typed = CLINE_USER_INPUT_RE.findall(b["text"])
                    if typed:   # the user's words; whatever surrounds them was added by Cline
                        s.add("user", "\n\n".join(typed), role="user", ts=ts)
                        s.add("context", CLINE_USER_INPUT_RE.sub("", b["text"]), role="user", ts=ts)
                    else:
                        s.add("context", b["text"], role="user", ts=ts)
                elif btype in ("thinking", "reasoning"):
                    t = b.get("thinking") if isinstance(b.get("thinking"), str) else b.get("text")
                    s.add("thinking", t if isinstance(t, str) else "", role="assistant", ts=ts)
                elif btype == "tool_use":
                    tools.call(b.get("id"), str(b.get("name") or "tool"), b.get("input"), ts=ts)
                elif btype == "tool_result":
                    out, failed = self._sdk_output(b.get("content"))
                    tools.result(b.get("tool_use_id"), out, bool(b.get("is_error")) or failed,
                                 name=b.get("name"), ts=ts)
        for key in ("started_at", "ended_at"):
            s.touch(norm_time(manifest.get(key)))
        # By default the title is the first prompt (perhaps shortened): a name only when it is not.
        prompts = [c.text for c in s.chunks if c.kind == "user"][:1] + [
            CLINE_USER_INPUT_RE.sub(r"\1", p) for p in (manifest.get("prompt"), meta.get("prompt")) if isinstance(p, str)]
        if title and not any(p.strip().startswith(title.rstrip(".… ")) for p in prompts):
            s.name = title
        _finish_times(s, path)
        return s

    @staticmethod
    def _sdk_output(content):
        """A tool result's text, and whether it failed. run_commands answers with one
        {query, result, error, success} entry per command."""
        if isinstance(content, list) and content and all(isinstance(c, dict) and "query" in c for c in content):
            lines, failed = [], False
            for c in content:
                lines.append("$ %s" % c.get("query"))
                for k in ("result", "error"):
                    if isinstance(c.get(k), str) and c[k] and c[k] not in lines[-1]:
                        lines.append(c[k])
                failed = failed or c.get("success") is False
            return "\n".join(lines), failed
        return _out_text(content), False


# -------------------------------------------------------------------------------------------------
# Kilo Code (Kilo-Org/kilocode; Kilo CLI 7.x and the extension built on it): ~/.local/share/kilo/kilo.db
# -------------------------------------------------------------------------------------------------


@register
class KiloParser(OpenCodeParser):
    """Kilo Code's current store: the Kilo CLI is an OpenCode fork and writes OpenCode's SQLite schema
    (session / message / part, MessageV2 JSON) to kilo.db (or kilo-<channel>.db) in its own data
    folder, so OpenCode's reading serves; only where it lies, its name and the resume command differ.
    Each session row names the Kilo release that wrote it (`version`). The database is in WAL mode:
    a prompt may change only kilo.db-wal, which is therefore watched with it. Kilo's older VS Code
    extension kept Cline-style task folders, read by the Cline parser.
    """

    id, label, version = "kilo", "Kilo Code", 2
    verified = "7.7.9, 2026-11-24"   # records and blocks: OpenCode's

    def default_roots(self, env):
        data = os.path.join(xdg_data(env), "kilo")
        roots = [data]
        if env.get("KILO_DB"):   # absolute, or relative to the data folder
            roots.append(os.path.join(data, env_path(env, "KILO_DB")))
        return roots

    def list_files(self, root):
        if os.path.isfile(root):
            return [root] if root.endswith(".db") else []
        return walk_files(root, lambda n: n.startswith("kilo") and n.endswith(".db"), max_depth=1)

    def sidecars(self, path):
        return [path + "-wal"]

    def resume_command(self, row):
        # `kilo -s ID` resumes in the session's own folder from anywhere (checked with 7.7.9).
        return "kilo -s %s" % shell_quote(row["session_id"]) if row.get("session_id") else None


# -------------------------------------------------------------------------------------------------
# GitHub Copilot CLI (what it writes): ~/.copilot/session-state/<id>/events.jsonl (and older layouts)
# -------------------------------------------------------------------------------------------------

COPILOT_TRUST_RE = LazyPattern(r"^Folder (.+) has been added to trusted folders")
# What Copilot appends to the text the user typed in a `user.message` content (seen in VS Code's agent
# writing this format, producer "copilot-agent", 2026-03): a <reminder>, the <attachments> (repository,
# branch, pull request), then the typed text again inside <userRequest>.
COPILOT_BLOCK_RE = LazyPattern(r"<(reminder|attachments|userRequest|current_datetime)\b[^>]*>(.*?)</\1>\s*", re.S)
_YAML_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                 "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                 "L": "\u2028", "P": "\u2029"}


def _copilot_user(text):
    """A user.message content -> (what the user typed, what Copilot injected around it)."""
    requests, injected = [], []
    for m in COPILOT_BLOCK_RE.finditer(text):
        if m.group(1) == "userRequest":
            requests.append(m.group(2).strip())
        else:
            injected.append(m.group(0).strip())
    rest = COPILOT_BLOCK_RE.sub("", text).strip()
    typed = "\n\n".join(requests)
    if rest and _text_key(rest) != _text_key(typed):   # the typed text before the blocks is the request again
        typed = (rest + "\n\n" + typed).strip()
    return typed, "\n".join(injected)


def _yaml_fold(lines):
    """YAML line folding of a multi-line flow scalar: a break between two lines is a space, each
    empty line a newline; the lines' surrounding blanks are not content."""
    out = lines[0].rstrip(" \t")
    blank = 0
    for line in lines[1:]:
        line = line.strip(" \t")
        if not line:
            blank += 1
            continue
        if out.endswith("\\") and (len(out) - len(out.rstrip("\\"))) % 2:   # an escaped line break
            out = out[:-1] + "\n" * blank + line
        else:
            out += ("\n" * blank if blank else " ") + line
        blank = 0
    return out + "\n" * blank


def _yaml_scalar(first, more):
    """The value of a YAML scalar that starts with `first` (after "key:") and goes on over the
    indented lines `more`: plain, single- or double-quoted (folded, escapes decoded) or a | / >
    block. Enough for the flat files agents write (stdlib has no YAML parser)."""
    first = first.strip()
    if first[:1] in ("|", ">"):
        body = list(more)
        while body and not body[-1].strip():
            body.pop()   # (trailing line breaks: what chomping decides, nothing a name needs)
        indent = min((len(l) - len(l.lstrip(" ")) for l in body if l.strip()), default=0)
        body = [l[indent:] for l in body]
        return "\n".join(body) if first[0] == "|" else _yaml_fold(body) if body else ""
    if first[:1] in ("'", '"'):
        q, raw = first[0], "\n".join([first[1:]] + more)
        i = 0
        while i < len(raw):   # the closing quote: '' is a quote in '...', \" is one in "..."
            if q == '"' and raw[i] == "\\":
                i += 2
                continue
            if raw[i] == q:
                if q == "'" and raw[i + 1:i + 2] == "'":
                    i += 2
                    continue
                break
            i += 1
        value = _yaml_fold(raw[:i].split("\n"))
        if q == "'":
            return value.replace("''", "'")
        return re.sub(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)",
                      lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) > 1
                      else _YAML_ESCAPES.get(m.group(1), m.group(0)), value)
    return _yaml_fold([first.split(" #")[0]] + more)


def _yaml_top_level(path, keys):
    """{key: string value} of the top-level keys wanted in a small YAML file ({} when unreadable)."""
    try:
        with open_regular(path, text=True) as f:
            lines = f.read(1 << 20).split("\n")
    except (OSError, UnicodeDecodeError):
        return {}
    found = {}
    for i, line in enumerate(lines):
        m = re.match(r"([A-Za-z_][\w-]*):(?:[ \t]+(.*))?\r?$", line)
        if m and m.group(1) in keys:
            more = []
            for nxt in lines[i + 1:]:
                if nxt.strip() and not nxt[:1].isspace():
                    break   # the next top-level key
                more.append(nxt.rstrip("\r"))
            found[m.group(1)] = _yaml_scalar(m.group(2) or "", more)
    return found


@register
class CopilotParser(Parser):
    """GitHub Copilot CLI event logs.

    Current builds write `session-state/<sessionId>/events.jsonl` (title: `name:` in the sibling
    workspace.yaml, set by /rename), older ones a flat `session-state/<sessionId>.jsonl` with the same
    events, the oldest `history-session-state/*.json` (one JSON object). A tool call can appear in
    `assistant.message.toolRequests` and in `tool.execution_start` in either order: both are merged by
    toolCallId. Events carrying `parentToolCallId` belong to a sub-agent and form a child session.
    The system prompt (`system.message`) and encrypted reasoning are never indexed.
    """

    id, label, version = "copilot", "GitHub Copilot CLI", 4
    records = ("session.start", "session.resume", "session.info", "subagent.started", "user.message",
               "assistant.message", "assistant.reasoning", "tool.execution_start", "tool.execution_complete",
               "system.notification", "session.compaction_start", "session.compaction_complete")
    # model changes, turns, hooks, usage, shutdown, the system prompt: not conversation
    skipped_records = ("session.model_change", "session.truncation", "session.shutdown", "session.error",
                       "session.usage_checkpoint", "session.auto_mode_resolved", "assistant.turn_start",
                       "assistant.turn_end", "assistant.usage", "subagent.completed", "subagent.failed",
                       "hook.start", "hook.end", "abort", "system.message")

    def default_roots(self, env):
        home = env_path(env, "COPILOT_HOME") or os.path.join(_home(env), ".copilot")
        return [os.path.join(home, "session-state"), os.path.join(home, "history-session-state")]

    def list_files(self, root):
        if os.path.isfile(root):
            return [root]
        files = walk_files(root, lambda n: n.endswith(".jsonl") or n.endswith(".json"), max_depth=1)
        top = os.path.abspath(root)
        return [f for f in files if os.path.basename(f) == "events.jsonl"
                or os.path.dirname(os.path.abspath(f)) == top]

    resumable = True
    SEEN = 50   # texts remembered to index each once: the last thoughts, the distinct injected blocks

    def parse(self, path, report, resume=None, limit=None):
        if path.endswith(".json"):
            return self._legacy_history(path)   # one JSON document: read whole, no checkpoint
        head = first_json_line(path)
        if not head or not isinstance(head.get("type"), str) or "data" not in head:
            raise NotASessionFile("no Copilot event envelope")
        folder_id = os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "events.jsonl" \
            else os.path.splitext(os.path.basename(path))[0]
        top = Session(self.id, folder_id, path)
        r = Resumption(top, resume, limit, session_id=None, cwd=None, subagents={}, thoughts=[], injected=[])
        state = r.state
        sessions = {None: top}
        tools = {None: ToolCalls(top)}
        for offset, e in iter_jsonl(path, report, r.start):
            etype, data = self.record_type(report, e), e.get("data")
            sub = data.get("parentToolCallId") if isinstance(data, dict) else None
            if sub not in sessions:
                if resume:   # a sub-agent's first event: a second session in the file (see ReadAgain)
                    raise ReadAgain()
                child = Session(self.id, None, path)   # id set once the parent's id is known
                sessions[sub] = child
                tools[sub] = ToolCalls(child)
            self._event(e, etype, data, sessions[sub], tools[sub], state, report)
            if r.line_done(offset, tools[None].waiting, tools[None].give_up) and len(sessions) == 1:
                break
        top.session_id = state["session_id"] or folder_id
        top.cwd = state["cwd"]
        top.name = self._workspace_name(os.path.dirname(path)) if os.path.basename(path) == "events.jsonl" else None
        out = [top]
        if len(sessions) == 1:
            r.finish()
        else:   # sub-agents' sessions: the file is read whole each time (the indexer resumes one session)
            top.complete = True
        for key, child in sessions.items():
            if key is None or not child.chunks:
                continue
            child.session_id = "%s/%s" % (top.session_id, key)
            child.parent, child.cwd = top.session_id, top.cwd
            child.name = state["subagents"].get(key)
            out.append(child)
        for s in out:
            _finish_times(s, path)
        return out

    def _event(self, e, etype, data, s, calls, state, report):
        """One event of the log, into its session `s` (the top one or a sub-agent's)."""
        if not isinstance(data, dict):
            report.skip("malformed event")
            return
        ts = norm_time(e.get("timestamp"))
        if etype in ("session.start", "session.resume"):
            report.saw_version(data.get("copilotVersion"))
            if etype == "session.start" and isinstance(data.get("sessionId"), str) and data["sessionId"]:
                state["session_id"] = data["sessionId"]
            ctx = data.get("context")
            if isinstance(ctx, dict) and isinstance(ctx.get("cwd"), str) and not state["cwd"]:
                state["cwd"] = ctx["cwd"]
            s.touch(norm_time(data.get("startTime")) or ts)
            return
        if etype == "session.info":
            hit = COPILOT_TRUST_RE.match(str(data.get("message") or ""))
            if hit and not state["cwd"]:
                state["cwd"] = hit.group(1)
            return
        if etype == "subagent.started" and data.get("toolCallId"):
            state["subagents"] = dict(state["subagents"], **{
                str(data["toolCallId"]): data.get("agentDisplayName") or data.get("agentName")})
            return
        if etype in ("user.message", "assistant.message", "assistant.reasoning", "tool.execution_start",
                     "tool.execution_complete", "system.notification") or "compaction" in str(etype):
            s.touch(ts)
        if etype == "user.message":
            typed, injected = _copilot_user(data.get("content") if isinstance(data.get("content"), str) else "")
            s.add("user", typed, role="user", ts=ts)
            if self._first_time(state, "injected", injected):   # the same reminder and attachments each turn
                s.add("context", injected, role="user", ts=ts)
        elif etype == "assistant.reasoning":
            text = data.get("content") if isinstance(data.get("content"), str) else ""
            if text and self._first_time(state, "thoughts", text):
                s.add("thinking", text, role="assistant", ts=ts)
        elif etype == "assistant.message":
            text = data.get("reasoningText")
            if isinstance(text, str) and text and self._first_time(state, "thoughts", text):
                s.add("thinking", text, role="assistant", ts=ts)
            s.add("assistant", data.get("content") if isinstance(data.get("content"), str) else "",
                  role="assistant", ts=ts)
            for req in _list(data.get("toolRequests")):
                if isinstance(req, dict):
                    calls.call(req.get("toolCallId"), str(req.get("name") or "tool"), _json_arg(req.get("arguments")), ts=ts)
        elif etype == "tool.execution_start":
            calls.call(data.get("toolCallId"), str(data.get("toolName") or "tool"), _json_arg(data.get("arguments")), ts=ts)
        elif etype == "tool.execution_complete":
            result = data.get("result")
            output = result.get("content") if isinstance(result, dict) else result
            if not isinstance(output, str):
                output = text_of(output)
            error = data.get("error")
            if not output and isinstance(error, dict):
                output = str(error.get("message") or "")
            calls.result(data.get("toolCallId"), output, data.get("success") is False, ts=ts)
        elif etype == "system.notification":
            s.add("context", data.get("content") if isinstance(data.get("content"), str) else "", role="system", ts=ts)
        elif "compaction" in str(etype):
            summary = data.get("summaryContent") or data.get("summary")
            if isinstance(summary, str):
                s.add("summary", summary, role="system", ts=ts)
        # model changes, turns, hooks, usage, shutdown, the system prompt: not conversation

    def _first_time(self, state, key, text):
        """Whether `text` is not among the last SEEN texts of state[key] (then it is remembered)."""
        digest = text_digest(_text_key(text))
        if not text.strip() or digest in state[key]:
            return False
        state[key] = (state[key] + [digest])[-self.SEEN:]
        return True

    def sidecars(self, path):
        return [os.path.join(os.path.dirname(path), "workspace.yaml")] if os.path.basename(path) == "events.jsonl" else []

    @staticmethod
    def _workspace_name(folder):
        """The session's name in workspace.yaml: `name:` (set by /rename), else the `summary:` Copilot
        writes for its session list (often the first prompt, up to 500 characters over many lines:
        its first line, as a list shows it)."""
        meta = _yaml_top_level(os.path.join(folder, "workspace.yaml"), ("name", "summary"))
        return " ".join((meta.get("name") or "").split()) or _one_line(meta.get("summary"))

    def _legacy_history(self, path):
        data = _load_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("history"), list):
            raise NotASessionFile("no Copilot history list")
        s = Session(self.id, data.get("sessionId") or os.path.splitext(os.path.basename(path))[0], path)
        s.cwd = data.get("workspacePath") if isinstance(data.get("workspacePath"), str) else None
        for m in data["history"]:
            if not isinstance(m, dict):
                continue
            ts = norm_time(m.get("time"))
            s.touch(ts)
            text = m.get("content") if m.get("content") is not None else m.get("result")
            text = text if isinstance(text, str) else text_of(text)
            if m.get("role") in ("human", "user"):
                s.add("user", text, role="user", ts=ts)
            elif m.get("role") == "assistant":
                s.add("assistant", text, role="assistant", ts=ts)
        _finish_times(s, path)
        return [s]


# -------------------------------------------------------------------------------------------------
# Amp (Sourcegraph): ~/.local/share/amp/threads/T-<uuid>.json
# -------------------------------------------------------------------------------------------------


@register
class AmpParser(Parser):
    """Amp threads: one JSON file per thread, rewritten in place.

    `{id, title, created (ms), env.initial.trees[{uri: file:///...}], messages[{role, content blocks
    (text, thinking, tool_use, tool_result{toolUseID, run{status, result|progress}}), meta.sentAt}]}`.
    The cwd is the first workspace tree; the title is Amp's own (generated or renamed). `info`
    messages carry compaction summaries.
    """

    id, label, version = "amp", "Amp", 2
    records = ("user", "assistant", "info")   # message roles (info: summaries; another's text is context)
    blocks, skipped_blocks = ("text", "thinking", "tool_use", "tool_result", "summary"), ("image", "redacted_thinking")

    def default_roots(self, env):
        roots = [os.path.join(xdg_data(env), "amp", "threads")]
        for storage in vscode_global_storage(env):   # the VS Code extension's older store
            d = os.path.join(storage, "sourcegraph.amp", "threads3")
            if root_isdir(env, d):
                roots.append(d)
        return roots

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".json"), max_depth=0)

    def parse(self, path, report):
        data = _load_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list) or not data.get("id"):
            raise NotASessionFile("no Amp thread object")
        s = Session(self.id, str(data["id"]), path)
        s.name = data["title"].strip() if isinstance(data.get("title"), str) and data["title"].strip() else None
        s.cwd = self._cwd(data.get("env"))
        created = norm_time(data.get("created"))
        s.touch(created)
        tools = ToolCalls(s)
        for m in data["messages"]:
            if not isinstance(m, dict):
                report.skip("malformed message")
                continue
            role = self.record_type(report, m, key="role", family="role ")
            meta = m.get("meta") if isinstance(m.get("meta"), dict) else {}
            usage = m.get("usage") if isinstance(m.get("usage"), dict) else {}
            ts = norm_time(meta.get("sentAt")) or norm_time(usage.get("timestamp"))
            s.touch(ts)
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                btype = self.block_type(report, b)
                if btype == "text" and isinstance(b.get("text"), str):
                    if role == "user":
                        s.add("user", b["text"], role="user", ts=ts)
                    elif role == "assistant":
                        s.add("assistant", b["text"], role="assistant", ts=ts)
                    else:
                        s.add("context", b["text"], role=str(role), ts=ts)
                elif btype == "thinking" and isinstance(b.get("thinking"), str):
                    s.add("thinking", b["thinking"], role="assistant", ts=ts)
                elif btype == "tool_use":
                    tools.call(b.get("id"), str(b.get("name") or "tool"), b.get("input"), ts=ts)
                elif btype == "tool_result":
                    run = b.get("run") if isinstance(b.get("run"), dict) else {}
                    out = run.get("result") if run.get("result") is not None else run.get("progress")
                    if isinstance(out, dict) and isinstance(out.get("output"), str):
                        out = out["output"]
                    elif not isinstance(out, str) and out is not None:
                        out = text_of(out) or json.dumps(out, ensure_ascii=False)
                    tools.result(b.get("toolUseID") or b.get("tool_use_id"), out or "",
                                 run.get("status") in ("error", "cancelled", "rejected-by-user"), ts=ts)
                elif btype == "summary" and isinstance(b.get("summary"), dict):
                    text = b["summary"].get("summary")
                    if isinstance(text, str):
                        s.add("summary", text, role="system", ts=ts)
        if s.created is None:
            _finish_times(s, path)
        elif s.modified == s.created and len(s.chunks) > 1:
            s.modified = max(s.created, file_mtime_iso(path))  # older threads have no message times
        return [s]

    @staticmethod
    def _cwd(env):
        initial = env.get("initial") if isinstance(env, dict) else None
        if not isinstance(initial, dict):
            return None
        if isinstance(initial.get("cwd"), str):
            return initial["cwd"]
        for tree in _list(initial.get("trees")):
            uri = tree.get("uri") if isinstance(tree, dict) else None
            if isinstance(uri, str) and uri.startswith("file://"):
                from urllib.parse import unquote, urlparse
                p = unquote(urlparse(uri).path)
                return p[1:] if re.match(r"^/[A-Za-z]:/", p) else p   # file:///C:/x on Windows
        return None


# -------------------------------------------------------------------------------------------------
# Goose (block/goose): <data>/sessions/sessions.db, legacy <data>/sessions/<name>.jsonl
# -------------------------------------------------------------------------------------------------


@register
class GooseParser(Parser):
    """Goose sessions: the SQLite store (since ~1.10) and the older one-JSONL-per-session files.

    Messages hold `content_json`, a list of MessageContent (text, thinking, toolRequest{id,
    toolCall.value{name, arguments}}, toolResponse{id, toolResult.value}). Messages marked not
    user-visible (compaction summaries the agent keeps) are indexed as summaries. The sessions table
    stores times as SQLite CURRENT_TIMESTAMP text, which is UTC without a zone marker.
    """

    id, label, version = "goose", "Goose", 2
    records = ("user", "assistant")   # message roles; a message's content items are its blocks
    blocks = ("text", "thinking", "toolRequest", "frontendToolRequest", "toolResponse", "summarizationRequested",
              "conversationCompacted")
    # images, redacted thinking, confirmations: nothing to search
    skipped_blocks = ("image", "redactedThinking", "toolConfirmationRequest", "actionRequired", "systemNotification")

    def default_roots(self, env):
        home = _home(env)
        if env.get("GOOSE_PATH_ROOT"):
            return [os.path.join(env_path(env, "GOOSE_PATH_ROOT"), "data", "sessions")]
        data = xdg_data(env)
        candidates = [os.path.join(data, "goose", "sessions"),
                      os.path.join(data, "Block", "goose", "sessions"),
                      os.path.join(home, "Library", "Application Support", "Block", "goose", "sessions"),
                      os.path.join(home, "Library", "Application Support", "goose", "sessions"),
                      os.path.join(home, ".config", "goose", "sessions")]
        if env.get("APPDATA"):
            candidates.append(os.path.join(env["APPDATA"], "Block", "goose", "data", "sessions"))
        found = [c for c in candidates if root_isdir(env, c)]
        return found or candidates[:1]

    def list_files(self, root):
        files = walk_files(root, lambda n: n == "sessions.db" or n.endswith(".jsonl"), max_depth=1)
        # Goose imports the legacy JSONL files into sessions.db on first start: once the database
        # is beside them they would index every old session twice.
        with_db = {os.path.dirname(f) for f in files if os.path.basename(f) == "sessions.db"}
        return [f for f in files if f.endswith(".db") or os.path.dirname(f) not in with_db]

    def parse(self, path, report):
        if path.endswith(".jsonl"):
            return self._legacy(path, report)
        with AgentStore(path) as con:
            scols = set(_db_columns(con, "sessions"))
            mcols = set(_db_columns(con, "messages"))
            if not {"id", "working_dir"} <= scols or not {"session_id", "role", "content_json"} <= mcols:
                raise NotASessionFile("unknown schema (no Goose sessions/messages tables)")
            sessions, order = {}, []
            cur = con.execute("SELECT * FROM sessions")
            names = [d[0] for d in cur.description]
            for row in cur:
                r = dict(zip(names, row))
                s = Session(self.id, str(r["id"]), path)
                s.cwd = r.get("working_dir") or None
                s.parent = r.get("parent_session_id") or None
                title = r.get("name") if r.get("user_set_name") else None
                title = title or r.get("description") or r.get("name")
                s.name = title if isinstance(title, str) and title.strip() and title != s.session_id else None
                s.touch(self._utc(r.get("created_at")))
                s.touch(self._utc(r.get("updated_at")))
                sessions[s.session_id] = (s, ToolCalls(s))
                order.append(s)
            meta_col = "metadata_json" if "metadata_json" in mcols else "NULL"
            ts_col = "created_timestamp" if "created_timestamp" in mcols else ("timestamp" if "timestamp" in mcols else "NULL")
            for sid, role, content, meta, ts in con.execute(
                    "SELECT session_id, role, content_json, %s, %s FROM messages ORDER BY rowid" % (meta_col, ts_col)):
                entry = sessions.get(str(sid))
                if entry is None:
                    report.skip("message of an unknown session")
                    continue
                meta = _json_arg(meta) if meta else {}
                hidden = isinstance(meta, dict) and meta.get("userVisible") is False
                self._message(entry[0], entry[1], role, _json_arg(content), norm_time(ts), hidden, report)
        return order

    @staticmethod
    def _utc(value):
        # CURRENT_TIMESTAMP text is UTC but carries no zone; norm_time would read it as local time.
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?", value.strip()):
            value = value.strip() + "Z"
        return norm_time(value)

    @classmethod
    def _message(cls, s, calls, role, content, ts, hidden, report):
        if not isinstance(content, list):
            report.skip("malformed message content")
            return
        s.touch(ts)
        for c in content:
            if not isinstance(c, dict):
                continue
            ctype = cls.block_type(report, c)
            if ctype == "text" and isinstance(c.get("text"), str):
                kind = "summary" if hidden else ("user" if role == "user" else "assistant")
                s.add(kind, c["text"], role=role, ts=ts)
            elif ctype == "thinking" and isinstance(c.get("thinking"), str):
                s.add("thinking", c["thinking"], role="assistant", ts=ts)
            elif ctype in ("toolRequest", "frontendToolRequest"):
                call = c.get("toolCall") if isinstance(c.get("toolCall"), dict) else {}
                value = call.get("value") if isinstance(call.get("value"), dict) else call
                calls.call(c.get("id"), str(value.get("name") or "tool"), value.get("arguments"), ts=ts)
            elif ctype == "toolResponse":
                result = c.get("toolResult") if isinstance(c.get("toolResult"), dict) else {}
                value = result.get("value")
                is_error = result.get("status") == "error"
                if isinstance(value, dict):   # newer builds: CallToolResult {content, isError}
                    is_error = is_error or bool(value.get("isError"))
                    value = value.get("content")
                output = text_of(value) if value is not None else str(result.get("error") or "")
                calls.result(c.get("id"), output, is_error, ts=ts)
            elif ctype in ("summarizationRequested", "conversationCompacted") and isinstance(c.get("msg"), str):
                s.add("context", c["msg"], role="system", ts=ts)
            # images, redacted thinking, confirmations: nothing to search

    def _legacy(self, path, report):
        head = first_json_line(path)
        if not head or "working_dir" not in head:
            raise NotASessionFile("no Goose session metadata line")
        s = Session(self.id, os.path.splitext(os.path.basename(path))[0], path)
        s.cwd = head.get("working_dir") or None
        s.name = head.get("description") or None
        calls = ToolCalls(s)
        first = True
        for _, m in iter_jsonl(path, report):
            if first:   # the metadata line
                first = False
                continue
            self._message(s, calls, m.get("role"), m.get("content"), norm_time(m.get("created")), False, report)
        _finish_times(s, path)
        return [s]


# -------------------------------------------------------------------------------------------------
# Crush (charmbracelet/crush): <project>/.crush/crush.db
# -------------------------------------------------------------------------------------------------

CRUSH_DEFAULT_TITLES = ("", "New Session", "Untitled Session")


@register
class CrushParser(Parser):
    """Crush's per-project SQLite store: sessions, and messages whose `parts` is a JSON list of
    {type, data} (text, reasoning, tool_call with a JSON-string input, tool_result, shell_command).

    Tool results are separate `role='tool'` messages joined to their call by id. Times are epoch
    seconds although the schema says ms, so rows are ordered by rowid (ties are common). Sub-agent
    ("agent" tool) sessions point to their parent; the "title-<id>" sessions Crush creates only to
    generate a title repeat the first prompt and are skipped. Crush keeps no global store: the
    database sits in each project's `.crush` folder, so it is found under configured folders, and
    the cwd is `sessions.workspace_cwd` (added in 2026-03), else that project folder (or `started_in`
    where a build records it).
    """

    id, label, version = "crush", "Crush", 3
    verified = "schema of the migrations up to 2026-09-25 (source), 2026-11-25"
    records = ("user", "assistant", "tool")   # message roles; a message's parts are its blocks
    blocks = ("text", "reasoning", "tool_call", "tool_result", "shell_command")
    # Parts with nothing to search: the end of a turn, images and binary attachments.
    skipped_blocks = frozenset({"finish", "image_url", "binary"})

    def default_roots(self, env):
        return []  # per project only: Crush keeps .crush/ in each project; configure folders holding projects

    project_files = (".crush/crush.db", ".crush/crush.db-wal")

    def list_files(self, root):
        return [f for f in project_files(root, self.project_files) if f.endswith(".db")]

    def sidecars(self, path):
        return [path + "-wal"]   # WAL mode: a prompt may change only crush.db-wal

    def parse(self, path, report):
        with AgentStore(path) as con:
            scols = _db_columns(con, "sessions")
            mcols = set(_db_columns(con, "messages"))
            if "id" not in scols or not {"session_id", "role", "parts"} <= mcols:
                raise NotASessionFile("unknown schema (no Crush sessions/messages tables)")
            folder = os.path.dirname(os.path.abspath(path))
            project = os.path.dirname(folder) if os.path.basename(folder) == ".crush" else None
            sessions, order, summaries = {}, [], set()
            cur = con.execute("SELECT * FROM sessions ORDER BY rowid")
            names = [d[0] for d in cur.description]
            for row in cur:
                r = dict(zip(names, row))
                sid = str(r["id"])
                if sid.startswith("title-"):
                    continue
                s = Session(self.id, sid, path)
                s.parent = r.get("parent_session_id") or None
                # workspace_cwd: the folder the session ran in (Crush 2026-03 on); the project's own
                # folder (where .crush sits) before that.
                s.cwd = r.get("workspace_cwd") or r.get("started_in") or project
                s.name = r["title"] if r.get("title") not in CRUSH_DEFAULT_TITLES and isinstance(r.get("title"), str) else None
                s.touch(norm_time(r.get("created_at")))
                s.touch(norm_time(r.get("updated_at")))
                if r.get("summary_message_id"):
                    summaries.add(r["summary_message_id"])
                sessions[sid] = (s, ToolCalls(s))
                order.append(s)
            summary_col = "is_summary_message" if "is_summary_message" in mcols else "0"
            for mid, sid, role, parts, created, is_summary in con.execute(
                    "SELECT id, session_id, role, parts, created_at, %s FROM messages ORDER BY rowid" % summary_col):
                entry = sessions.get(str(sid))
                if entry is None:
                    continue   # title sessions, or rows of a deleted session
                parts = _json_arg(parts)
                if not isinstance(parts, list):
                    report.skip("malformed message parts")
                    continue
                self._message(entry[0], entry[1], role, parts, norm_time(created),
                              bool(is_summary) or mid in summaries, report)
        return order

    def _message(self, s, calls, role, parts, ts, is_summary, report):
        s.touch(ts)
        for p in parts:
            if not isinstance(p, dict) or not isinstance(p.get("data"), dict):
                continue
            ptype, d = self.block_type(report, p), p["data"]
            if ptype == "text" and isinstance(d.get("text"), str):
                kind = "summary" if is_summary else {"user": "user", "assistant": "assistant"}.get(role, "context")
                s.add(kind, d["text"], role=role, ts=ts)
            elif ptype == "reasoning" and isinstance(d.get("thinking"), str):
                s.add("thinking", d["thinking"], role="assistant", ts=ts)
            elif ptype == "tool_call":
                calls.call(d.get("id"), str(d.get("name") or "tool"), _json_arg(d.get("input")), ts=ts)
            elif ptype == "tool_result":
                content = d.get("content") if isinstance(d.get("content"), str) else text_of(d.get("content"))
                calls.result(d.get("tool_call_id"), content, bool(d.get("is_error")), name=d.get("name") or None, ts=ts)
            elif ptype == "shell_command":
                args = {"command": d.get("command")}
                s.add("tool", tool_text("bash", args, d.get("output") or "", bool(d.get("exit_code"))),
                      role="user", tool="bash", ts=ts)


# -------------------------------------------------------------------------------------------------
# Factory Droid (what droid writes): ~/.factory/sessions/**/<id>.jsonl (session store) and stream-json logs
# -------------------------------------------------------------------------------------------------


@register
class DroidParser(Parser):
    """Factory Droid sessions, two dialects.

    Session store (`~/.factory/sessions/<slug>/<id>.jsonl`): a `session_start` line (id, title,
    sessionTitle, cwd) then `message` lines holding Anthropic-style `message.content` blocks (text,
    thinking, tool_use, tool_result). Stream-json logs (`droid exec --output-format stream-json`,
    found under `~/.factory/projects`): flat `system|message|tool_call|tool_result|completion`
    events keyed by `session_id`/`sessionId`. Droid prepends `<system-reminder>` blocks to user
    text; those are indexed as context.
    """

    id, label, version = "droid", "Factory Droid", 4
    # The session store's lines, then stream-json's events; Anthropic-style blocks in the store.
    records = ("session_start", "message", "system", "tool_call", "tool_result", "completion")
    skipped_records, version_field = ("error",), "version"   # session_start names the release
    blocks, skipped_blocks = ("text", "thinking", "tool_use", "tool_result"), ("image", "redacted_thinking")
    STREAM_TYPES = ("system", "message", "tool_call", "tool_result", "completion", "error")

    def default_roots(self, env):
        base = os.path.join(_home(env), ".factory")
        return [os.path.join(base, "sessions"), os.path.join(base, "projects")]

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".jsonl"), max_depth=4)

    resumable = True

    def parse(self, path, report, resume=None, limit=None):
        dialect = resume["state"].get("dialect") if resume else None
        if dialect is None:
            head = []
            for _, obj in iter_jsonl(path, ParseReport()):
                head.append(obj)
                if len(head) >= 5:
                    break
            if not head or head[0].get("type") not in self.records:   # e.g. pi's `session` header
                raise NotASessionFile("empty, not JSONL, or no Droid record first")
            if any(o.get("type") == "session_start" or (o.get("type") == "message" and isinstance(o.get("message"), dict))
                   for o in head):
                dialect = "store"
            elif any(o.get("type") in self.STREAM_TYPES and (o.get("session_id") or o.get("sessionId")) for o in head):
                dialect = "stream"
            else:
                raise NotASessionFile("no Droid session_start or stream-json events")
        s = Session(self.id, None, path)
        r = Resumption(s, resume, limit, dialect=dialect, session_id=None, name=None, cwd=None, last_id=None)
        (self._store if dialect == "store" else self._stream)(s, r, path, report)
        r.finish()
        s.session_id = r.state["session_id"] or os.path.splitext(os.path.basename(path))[0]
        s.name, s.cwd = r.state["name"], r.state["cwd"]
        if not s.chunks and not resume:
            # Droid writes session_start when a session opens (title "New Session"): one left before
            # anything was said holds nothing to find. Listed with this reason, read again when it grows.
            raise NotASessionFile("nothing said in it (a session opened and left)")
        _finish_times(s, path)
        return [s]

    def _store(self, s, r, path, report):
        state, calls = r.state, ToolCalls(s)
        for offset, e in iter_jsonl(path, report, r.start):
            etype, m = self.record_type(report, e), e.get("message")
            if etype == "session_start":
                state["session_id"] = _str(e.get("id")) or state["session_id"]
                state["name"] = _str(e.get("sessionTitle")) or _str(e.get("title")) or state["name"]
                state["cwd"] = _str(e.get("cwd")) or state["cwd"]
            elif etype != "message":
                pass  # settings/todo/compaction bookkeeping: nothing to search
            elif not isinstance(m, dict):
                report.skip("malformed message")
            else:
                self._message(s, m, norm_time(e.get("timestamp")), calls, report)
            if r.line_done(offset, calls.waiting, calls.give_up):
                break

    @classmethod
    def _message(cls, s, m, ts, calls, report):
        s.touch(ts)
        role, content = m.get("role"), m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return
        texts, thinking, uses = [], [], []
        for b in content:
            if not isinstance(b, dict):
                continue
            bt = cls.block_type(report, b)
            if bt == "text" and isinstance(b.get("text"), str):
                texts.append(b["text"])
            elif bt == "thinking" and isinstance(b.get("thinking"), str):
                thinking.append(b["thinking"])
            elif bt == "tool_use":
                uses.append(b)
            elif bt == "tool_result":
                calls.result(b.get("tool_use_id"), _out_text(b.get("content")), bool(b.get("is_error")), ts=ts)
        if role == "user":
            _add_user(s, "\n".join(texts), ts)
        else:
            s.add("thinking", "\n".join(thinking), role="assistant", ts=ts)
            s.add("assistant", "\n".join(texts), role="assistant", ts=ts)
        for b in uses:
            calls.call(b.get("id"), b.get("name"), b.get("input"), ts)

    def _stream(self, s, r, path, report):
        state, calls = r.state, ToolCalls(s)
        for offset, e in iter_jsonl(path, report, r.start):
            etype = self.record_type(report, e)
            if state["session_id"] is None:
                state["session_id"] = _str(e.get("session_id")) or _str(e.get("sessionId"))
            ts = norm_time(e.get("timestamp"))
            s.touch(ts)
            if etype == "system":
                state["cwd"] = state["cwd"] or _str(e.get("cwd")) or _str(e.get("workingDirectory"))
            elif etype == "message":
                text = e.get("text") if isinstance(e.get("text"), str) else e.get("content")
                if not isinstance(text, str):
                    pass
                elif e.get("role") == "user":
                    _add_user(s, text, ts)
                elif e.get("subtype") == "delta" and s.chunks and s.chunks[-1].kind == "assistant" \
                        and state["last_id"] == e.get("id"):
                    s.chunks[-1].extend(text)  # streamed fragments of one message: one chunk
                else:
                    s.add("assistant", text, role="assistant", ts=ts)
                    state["last_id"] = e.get("id")
            elif etype == "tool_call":
                cid = e.get("toolCallId") or e.get("tool_call_id") or e.get("id")
                args = e.get("parameters") if "parameters" in e else e.get("input")
                calls.call(cid, e.get("toolName") or e.get("tool_name") or e.get("name"), args, ts)
            elif etype == "tool_result":
                cid = e.get("toolCallId") or e.get("tool_call_id") or e.get("id")
                value = e.get("value")
                err = bool(e.get("isError") or e.get("is_error"))
                if isinstance(value, dict) and isinstance(value.get("exitCode"), int) and value["exitCode"] != 0:
                    err = True
                calls.result(cid, _out_text(value), err, name=e.get("toolName"), ts=ts)
            elif etype == "completion":
                final = e.get("finalText")
                # The final text usually repeats the last assistant message: index it once.
                if isinstance(final, str) and ("assistant", text_digest(final.strip())) not in r.recent():
                    s.add("assistant", final, role="assistant", ts=ts)
            # A message that streamed deltas may still extend is not settled.
            if r.line_done(offset, calls.waiting, calls.give_up, settled=not (s.chunks and s.chunks[-1].kind == "assistant")):
                break


# -------------------------------------------------------------------------------------------------
# Qwen Code (QwenLM/qwen-code, a Gemini CLI fork): ~/.qwen/projects/<project>/chats/<sessionId>.jsonl (QWEN_HOME)
# -------------------------------------------------------------------------------------------------


def _iter_glued_jsonl(path, report, start=0):
    """Like iter_jsonl, but a physical line holding several JSON objects glued together (a Qwen
    writer bug) yields each of them; only an unparsable tail is skipped. Yields (offset of the
    line, offset after it, object)."""
    dec = json.JSONDecoder()
    with open_regular(path) as f:
        f.seek(start)
        offset = start
        while True:
            raw = f.readline(MAX_LINE_BYTES)
            if not raw:
                return
            line_start = offset
            offset += len(raw)
            if not raw.endswith(b"\n"):
                if len(raw) == MAX_LINE_BYTES:
                    while raw and not raw.endswith(b"\n"):
                        raw = f.readline(1 << 20)
                        offset += len(raw)
                    report.skip("line too long")
                    continue
                values, whole = _glued_values(dec, json_text(raw))
                if values and whole and all(isinstance(v, dict) for v in values):
                    for obj in values:   # whole records, not a line still being written (see last_record)
                        yield line_start, offset, obj
                else:
                    report.skip("unfinished last line")
                return
            values, whole = _glued_values(dec, json_text(raw))
            for obj in values:
                if isinstance(obj, dict):
                    yield line_start, offset, obj
                else:
                    report.skip("malformed line")
            if not whole:
                report.skip("malformed line")


def _glued_values(dec, line):
    """(the JSON values glued together on one line, in order; whether the whole line parsed)."""
    values, pos = [], 0
    while pos < len(line):
        try:
            obj, pos = dec.raw_decode(line, pos)
        except BAD_JSON:
            return values, False
        values.append(obj)
        while pos < len(line) and line[pos] in " \t\r":
            pos += 1
    return values, True


_ID_LIKE = LazyPattern(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_QWEN_HOOK_CONTEXT = "<qwen:user-prompt-submit-context>"


@register
class QwenParser(Parser):
    """Qwen Code chat records (a Gemini CLI fork that moved to Claude-like JSONL records).

    Each line is a ChatRecord `{uuid, parentUuid, sessionId, timestamp, type: user|assistant|
    tool_result|system, subtype?, cwd, message: {role, parts[]}, systemPayload?, toolCallResult?}`.
    Differences from Gemini CLI: Gemini-style `parts` inside Claude-style uuid records; one uuid can be
    written as several fragments (thought first, then calls/text) -> merged, exact repeats dropped;
    rewinds leave dead branches (all branches are indexed, like pi); `/branch` copies parent records
    verbatim with `forkedFrom` -> dropped, the parent is recorded; the title is the latest
    `custom_title` record (re-appended periodically). Hook context, notifications and cron prompts are
    injected -> context. A line can hold several glued objects.

    Resumable while a file holds one session: a read stops before a record of a new uuid when no
    call waits for its result; the state carries the session's id, folder, name, parent, times and
    a CRC of each record key and call id indexed. A line appended after that which adds to one of
    them (another fragment of an indexed record, the result of an indexed call) or starts another
    session (a sidechain) makes the file read again from its start (ReadAgain).
    """

    id, label, version = "qwen", "Qwen Code", 3
    resumable = True
    verified = "0.15.10 and 0.24.4, 2026-11-26"
    # ~/.qwen/usage_record.jsonl (0.2x: usageHistoryService.ts): one line {sessionId, project,
    # startTime, ...} when a run ends or /clear starts another session; none during an interactive one.
    journal = ("usage_record.jsonl", ("sessionId",))
    records, version_field = ("user", "assistant", "tool_result", "system"), "version"
    INJECTED_SUBTYPES = ("notification", "cron", "goal_runtime", "background_task_completed")

    def default_roots(self, env):
        home = agent_dir(env, "QWEN_HOME", ".qwen")
        roots = [os.path.join(home, "projects"), os.path.join(home, "tmp")]
        if env.get("QWEN_RUNTIME_DIR"):
            roots.append(env_path(env, "QWEN_RUNTIME_DIR"))
        return roots

    def start_mark(self, root):
        # The journal gets its line when a run ends; a start shows earlier. 0.2x locks its extension
        # store at every start (ExtensionStore.withLock: proper-lockfile makes and removes
        # extension-store/lock.lock, which changes the folder's time; 0.24.4, checked with the real
        # CLI). 0.15 had no store, but pointed ~/.qwen/debug/latest at the new run's debug log (the
        # link made again), which 0.2x does only with QWEN_DEBUG_LOG_FILE set: the store comes first,
        # so that a link an older release left behind is not followed instead.
        root = root.rstrip(os.sep)
        if os.path.basename(root) not in ("projects", "tmp"):
            return None
        home = os.path.dirname(root)
        store = os.path.join(home, "extension-store")
        if os.path.isfile(os.path.join(store, "lock")):
            return store
        debug = os.path.join(home, "debug")
        return debug if os.path.islink(os.path.join(debug, "latest")) else None

    def resume_command(self, row):
        # `qwen --resume ID` finds a session among the current folder's project only (0.15.10 and
        # 0.24.4, checked with the real CLI).
        return resume_in_folder(row, "qwen --resume")

    def list_files(self, root):
        if os.path.isfile(root):
            return [root] if root.endswith(".jsonl") else []
        return [p for p in walk_files(root, lambda n: n.endswith(".jsonl"), max_depth=4)
                if os.sep + "chats" + os.sep in p]

    @staticmethod
    def _norm_id(v):
        return v.replace("-", "").lower()

    @staticmethod
    def _crc(*parts):
        return zlib.crc32("\x00".join(str(p) for p in parts).encode("utf-8", "surrogatepass"))

    def parse(self, path, report, resume=None, limit=None):
        stem = os.path.splitext(os.path.basename(path))[0]
        expect = self._norm_id(stem) if _ID_LIKE.match(stem) else None
        sessions = {}      # session id -> Session (main + sidechain sub-agents)
        seen = {}          # (session id, uuid) -> set of part fingerprints already indexed
        calls = {}
        other, valid = None, 0
        main_id = None
        state = resume["state"] if resume else {}
        start = resume["offset"] if resume else 0
        known = set(state.get("seen") or ())   # CRCs of the record keys and call ids read before `start`
        keys = []        # CRCs of what this read indexes, in order (a checkpoint takes those before it)
        if resume:
            main_id, valid = state["id"], 1
            s = sessions[main_id] = Session(self.id, main_id, path)
            s.cwd, s.name, s.parent = state.get("cwd"), state.get("name"), state.get("parent")
            for ts in state.get("span") or ():
                s.touch(ts)
            calls[main_id] = ToolCalls(s)
        waiting = {}     # call id -> line number: calls without their result yet
        checkpoint, complete, last_key, line_at, line_no = None, True, None, None, 0
        for line_start, offset, r in _iter_glued_jsonl(path, report, start):
            first_on_line, line_at = line_start != line_at, line_start
            line_no += 1
            sid, uuid, rtype = r.get("sessionId"), r.get("uuid"), r.get("type")
            if not (isinstance(sid, str) and sid and isinstance(uuid, str) and uuid and "parentUuid" in r
                    and self.record_type(report, r) in self.records):
                report.skip("not a Qwen record")
                continue
            if expect and self._norm_id(sid) != expect:
                other = sid  # a record of another session: Qwen ignores it, so do we
                report.skip("record of another session")
                continue
            msg = r.get("message") if isinstance(r.get("message"), dict) else {}
            parts = [p for p in _list(msg.get("parts")) if isinstance(p, dict)]
            ids = self._call_ids(r, parts)
            if resume and (self._crc(sid, uuid) in known or any(self._crc("call", i) in known for i in ids)):
                raise ReadAgain()   # adds to a record or call an earlier read indexed
            for i in [i for i, since in waiting.items() if line_no - since > PENDING_CALL_LINES]:
                del waiting[i]   # a call whose result never came
            if first_on_line and (sid, uuid) != last_key and len(sessions) == 1 and not waiting:
                s = next(iter(sessions.values()))
                checkpoint = {"offset": line_start, "seq": len(s.chunks), "keys": len(keys), "state": {
                    "id": s.session_id, "cwd": s.cwd, "name": s.name, "parent": s.parent,
                    "span": [s.created, s.modified]}}
                if limit and line_start - start >= limit:
                    complete = False
                    break
            last_key = (sid, uuid)
            valid += 1
            main_id = main_id or sid
            s = sessions.get(sid)
            if s is None:
                if resume:
                    raise ReadAgain()   # another session in this file: read whole
                s = sessions[sid] = Session(self.id, sid, path)
                calls[sid] = ToolCalls(s)
            fork = r.get("forkedFrom")
            if isinstance(fork, dict):
                # /branch copied this record from the parent: indexed there already.
                s.parent = s.parent or _str(fork.get("sessionId"))
                continue
            agent = _str(r.get("agentId"))
            if agent and r.get("isSidechain"):
                key = "%s:%s" % (sid, agent)
                sub = sessions.get(key)
                if sub is None:
                    if resume:
                        raise ReadAgain()
                    sub = sessions[key] = Session(self.id, key, path)
                    sub.parent = sid
                    calls[key] = ToolCalls(sub)
                s, sid = sub, key
            ts = norm_time(r.get("timestamp"))
            s.touch(ts)
            if _str(r.get("cwd")) and rtype != "system":
                s.cwd = r["cwd"]  # latest message wins: it is the directory Qwen resumes in
            if (sid, uuid) not in seen:
                keys.append(self._crc(r.get("sessionId"), uuid))
            fps = seen.setdefault((sid, uuid), set())
            fresh = []
            for p in parts:
                fp = json.dumps(p, sort_keys=True)
                if fp not in fps:
                    fps.add(fp)
                    fresh.append(p)
            if (sid, uuid, "record") in seen and not fresh:
                continue
            seen[(sid, uuid, "record")] = True
            for i in ids:
                keys.append(self._crc("call", i))
                if rtype == "assistant":
                    waiting.setdefault(i, line_no)
                else:
                    waiting.pop(i, None)
            self._record(s, r, rtype, fresh, ts, calls[sid], report)
        if not valid:
            if other:
                raise NotASessionFile("records belong to session %s, not %s" % (other, stem))
            raise NotASessionFile("no Qwen chat records")
        out = []
        for s in sessions.values():
            _finish_times(s, path)
            out.append(s)
        if checkpoint is not None and len(sessions) == 1:
            checkpoint["state"]["seen"] = sorted(known.union(keys[:checkpoint.pop("keys")]))
            checkpoint["seq"] += resume["seq"] if resume else 0
            out[0].checkpoint = checkpoint
        out[0].complete = complete
        return out

    @staticmethod
    def _call_ids(r, parts):
        """The call ids a record names: its function calls' and results' (a result's id is its call's)."""
        ids = []
        for p in parts:
            for key in ("functionCall", "functionResponse"):
                if isinstance(p.get(key), dict) and isinstance(p[key].get("id"), str):
                    ids.append(p[key]["id"])
        result = r.get("toolCallResult")
        if isinstance(result, dict) and isinstance(result.get("callId"), str):
            ids.append(result["callId"])
        return ids

    def _record(self, s, r, rtype, parts, ts, calls, report):
        subtype = r.get("subtype")
        payload = r.get("systemPayload") if isinstance(r.get("systemPayload"), dict) else {}
        if rtype == "user":
            kind = "context" if subtype in self.INJECTED_SUBTYPES else "user"
            texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
            hook = [t for t in texts if t.strip().startswith(_QWEN_HOOK_CONTEXT)]
            texts = [t for t in texts if not t.strip().startswith(_QWEN_HOOK_CONTEXT)]
            shown = payload.get("displayText")
            if isinstance(shown, str):
                # displayText is what the user typed; parts may add expanded @file contents.
                s.add(kind, shown, role="user", ts=ts)
            else:
                s.add(kind, "\n".join(texts), role="user", ts=ts)
            s.add("context", "\n".join(hook), role="user", ts=ts)
        elif rtype == "assistant":
            thinking = [p["text"] for p in parts if isinstance(p.get("text"), str) and p.get("thought")]
            texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
            s.add("thinking", "\n".join(thinking), role="assistant", ts=ts)
            s.add("assistant", "\n".join(texts), role="assistant", ts=ts)
            for p in parts:
                fc = p.get("functionCall")
                if isinstance(fc, dict):
                    calls.call(fc.get("id"), fc.get("name"), fc.get("args"), ts)
        elif rtype == "tool_result":
            result = r.get("toolCallResult") if isinstance(r.get("toolCallResult"), dict) else {}
            err = bool(result.get("error")) or result.get("status") == "error"
            done = False
            for p in parts:
                fr = p.get("functionResponse")
                if isinstance(fr, dict):
                    out = _out_text(fr.get("response"))
                    # A failed shell command is a "success" whose output says "Exit Code: N".
                    code = SHELL_EXIT_RE.search(out or "")
                    calls.result(fr.get("id"), shell_fields(out) if fr.get("name") == "run_shell_command" else out,
                                 err or bool(code and int(code.group(1)) != 0), name=fr.get("name"), ts=ts)
                    done = True
            if not done and result:
                calls.result(result.get("callId"), _out_text(result.get("resultDisplay")), err,
                             name=result.get("name"), ts=ts)
        elif subtype == "custom_title":
            if _str(payload.get("customTitle")):
                s.name = payload["customTitle"].strip()
        elif subtype == "parent_session":
            s.parent = _str(payload.get("parentSessionId")) or s.parent
        elif subtype == "chat_compression":
            hist = payload.get("compressedHistory")
            if isinstance(hist, list) and hist and isinstance(hist[0], dict):
                first = hist[0].get("parts")
                if isinstance(first, list):
                    s.add("summary", "\n".join(p.get("text") for p in first
                                               if isinstance(p, dict) and isinstance(p.get("text"), str)),
                          role="compression", ts=ts)
        elif subtype == "slash_command":
            if payload.get("phase") == "invocation" and isinstance(payload.get("rawCommand"), str):
                s.add("user", payload["rawCommand"], role="slash_command", ts=ts)
        # other system records (ui_telemetry, snapshots, rewind markers...) carry nothing to search


# -------------------------------------------------------------------------------------------------
# Kimi (MoonshotAI/kimi-cli): Kimi Code ~/.kimi-code/sessions/.../wire.jsonl, kimi-cli ~/.kimi/sessions/<md5>/...
# -------------------------------------------------------------------------------------------------

# A kimi-cli 0.x session file is named by its UUID (a revert rotates it to <uuid>_<n>.jsonl: the old
# history, not a session of its own).
_KIMI_SESSION_FILE = LazyPattern(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.jsonl\Z")
# kimi-cli inserts this user message at each checkpoint when asked to: not typed by anyone.
_KIMI_CHECKPOINT = LazyPattern(r"\A\s*<system>CHECKPOINT \d+</system>\s*\Z")


@register
class KimiParser(Parser):
    """Kimi sessions, in the three layouts Kimi has written.

    Kimi Code (the current CLI): ~/.kimi-code/sessions/wd_<slug>/<sessionId>/agents/<agentId>/wire.jsonl,
    an op log (protocol 1.x). Line 1 `{type: metadata, protocol_version, created_at}`; then ops
    `{type, ..., time(ms)}`. User turns are `context.append_message` (origin.kind `user`;
    `injection`/`system_trigger` are injected -> context); assistant thinking/text/tool calls/results
    are `context.append_loop_event` events (`content.part`, `tool.call`, `tool.result`);
    `context.apply_compaction` carries the summary. `turn.prompt` repeats the user text and is not
    indexed. The session's `state.json` (three folders up) gives the title (custom title first) and
    workDir. Every folder under `agents/` other than `main` is a sub-agent: its own Session, parent
    from `parentAgentId`.

    kimi-cli 1.x (the archived Python CLI, protocol 1.9/1.10): ~/.kimi/sessions/<md5(cwd)>/<sessionId>/
    wire.jsonl, after the same metadata line `{timestamp (epoch s), message: {type, payload}}` events:
    TurnBegin/SteerInput (what the user typed), ContentPart (text, think), ToolCall, ToolResult
    (return_value: output, is_error). state.json beside it holds `custom_title`: a title the user
    set (`title_generated`) or, until then, the shortened first prompt (not a name). A sub-agent (the
    Task tool) has its own wire in subagents/<agentId>/ (meta.json describes it), so the
    SubagentEvent copies in the parent's wire are skipped; releases without that folder (protocol
    1.3: 9 sub-agents of a real session, 705 lines) write it only as SubagentEvent lines,
    `{task_tool_call_id, event: {type, payload}}`: these become the sub-agent's session
    `<sessionId>/<task_tool_call_id>`, named by the Task call's description (the context_sub_N.jsonl
    files beside them hold the same conversation as the model saw it). The cwd is in
    ~/.kimi/kimi.json, whose work_dirs are the folders the sessions folder names by md5.

    kimi-cli 0.x: ~/.kimi/sessions/<md5(cwd)>/<sessionId>.jsonl, the model's context itself:
    `{role, content, tool_calls, tool_call_id}` lines between `_checkpoint`/`_usage` bookkeeping
    lines, without timestamps.
    """

    id, label, version = "kimi", "Kimi", 5
    verified = "1.52.0, 2026-11-24"   # kimi-cli (also 1.40.0 and 0.50); Kimi Code not run
    # Kimi Code renames state.json in the session's folder (a temporary file) at every prompt
    # (kimi-code's atomicWrite, promptMetadata.ts): the wire two folders below it is checked then.
    folder_levels = 2
    # Records read for nothing on purpose: the op log's settings, snapshots and LLM bookkeeping, and
    # kimi-cli's progress, status, approvals and hooks (the sub-agent's own wire holds its events).
    # Kimi Code's operations and their loop events, kimi-cli 1.x's wire messages, 0.x's context roles.
    records = ("config.update", "profile.bind", "context.append_message", "context.append_loop_event",
               "context.apply_compaction", "turn.steer", "content.part", "tool.call", "tool.result",
               "TurnBegin", "SteerInput", "ContentPart", "ToolCall", "ToolResult", "BtwBegin", "BtwEnd", "PlanDisplay",
               "QuestionRequest", "SubagentEvent", "ToolCallPart", "user", "assistant", "tool")
    blocks, skipped_blocks = ("text", "think"), ("image_url", "audio_url", "video_url")
    skipped_records = frozenset({
        "llm.*", "tools.*", "_*", "system", "step.begin", "step.end", "turn.begin", "turn.end", "usage", "status",
        "metadata", "config.update", "profile.bind", "tools.set_active_tools", "turn.prompt", "turn.cancel",
        "turn.ended", "usage.record", "permission.record_approval_result", "permission.set_mode",
        "plan_mode.enter", "plan_mode.exit", "full_compaction.begin", "full_compaction.complete",
        "plugin.session_start", "runtime.set_binding", "token_counting.measured", "token_counting.turn_recorded",
        "StepBegin", "StepInterrupted", "StepRetry", "TurnEnd", "StatusUpdate", "Notification",
        "HookTriggered", "HookResolved", "HookRequest", "HookResponse", "MCPLoadingBegin", "MCPLoadingEnd",
        "CompactionBegin", "CompactionEnd", "ApprovalRequest", "ApprovalResponse", "ApprovalRequestResolved",
        "ToolCallRequest", "QuestionResponse"})

    def default_roots(self, env):
        home = agent_dir(env, "KIMI_CODE_HOME", ".kimi-code")
        share = agent_dir(env, "KIMI_SHARE_DIR", ".kimi")
        return [os.path.join(home, "sessions"), os.path.join(share, "sessions")]

    def project_journals(self, root):
        # kimi-cli's shell appends every prompt to ~/.kimi/user-history/<md5 of the work dir>.jsonl
        # (ui/shell/prompt.py, 1.52.0); that work dir's sessions are in sessions/<md5>/<id>/. (It
        # names the last session of a work dir in kimi.json only when it exits.)
        root = root.rstrip(os.sep)
        if os.path.basename(root) != "sessions":
            return None
        return (os.path.join(os.path.dirname(root), "user-history"),
                lambda name: os.path.join(root, name[:-len(".jsonl")]) if name.endswith(".jsonl") else None)

    def list_files(self, root):
        return walk_files(root, lambda n: n == "wire.jsonl" or _KIMI_SESSION_FILE.match(n), max_depth=5)

    resumable = True   # the wire.jsonl journals; a 0.x context file is read whole (no checkpoint)

    def parse(self, path, report, resume=None, limit=None):
        head = first_json_line(path)
        if head and head.get("type") == "metadata" and "protocol_version" in head:
            if self._is_cli_wire(path):
                return self._parse_wire(path, report, resume, limit)
            return [self._parse_kimi_code(path, head, report, resume, limit)]
        if head and isinstance(head.get("role"), str) and _KIMI_SESSION_FILE.match(os.path.basename(path)):
            return [self._parse_context(path, report)]
        raise NotASessionFile("no Kimi wire metadata line")

    @staticmethod
    def _is_cli_wire(path):
        """kimi-cli's events are `{timestamp, message}` envelopes, Kimi Code's ops carry their `type`; a
        journal holding only its metadata line is told by where it lies (Kimi Code's under agents/)."""
        lines = [l for l in read_head(path, 65536).split(b"\n")[1:] if l.strip()]
        if lines:
            try:
                second = json.loads(lines[0])
            except BAD_JSON:
                second = None
            if isinstance(second, dict):
                return isinstance(second.get("message"), dict) and "type" not in second
        return os.path.basename(os.path.dirname(os.path.dirname(path))) != "agents"

    # -- Kimi Code op log --------------------------------------------------------------------------

    def _parse_kimi_code(self, path, head, report, resume, limit):
        agent_folder = os.path.dirname(path)
        agents_dir = os.path.dirname(agent_folder)
        state = None
        if os.path.basename(agents_dir) == "agents":
            session_dir = os.path.dirname(agents_dir)
            sid, agent = os.path.basename(session_dir), os.path.basename(agent_folder)
            state = _read_json(os.path.join(session_dir, "state.json"))
        else:  # a lone journal (copied or exported): its name is all we have
            sid, agent = os.path.splitext(os.path.basename(path))[0], "main"
            state = _read_json(os.path.splitext(path)[0] + ".state.json")
        state = state or {}
        s = Session(self.id, sid if agent == "main" else "%s/%s" % (sid, agent), path)
        agents = state.get("agents") if isinstance(state.get("agents"), dict) else {}
        if agent != "main":
            info = agents.get(agent) if isinstance(agents.get(agent), dict) else {}
            parent = _str(info.get("parentAgentId")) or "main"
            s.parent = sid if parent == "main" else "%s/%s" % (sid, parent)
        else:
            if state.get("isCustomTitle") and _str(state.get("customTitle")):
                s.name = state["customTitle"].strip()
            else:
                s.name = _str(state.get("title"))
        created = norm_time(state.get("createdAt")) or norm_time(head.get("created_at"))
        # Carried across reads: the cwd the ops named, and (digests of) the steering input indexed
        # from turn.steer, which the context may repeat as a user message.
        r = Resumption(s, resume, limit, cwd=None, steered=[])
        calls = ToolCalls(s)
        last_part = None  # (step, part type) of the chunk that streamed parts extend
        for offset, e in iter_jsonl(path, report, r.start):
            etype = self.record_type(report, e)
            ts = norm_time(e.get("time"))
            m, ev = e.get("message"), e.get("event")
            if etype == "config.update" or etype == "profile.bind":
                disclosed = e.get("environmentDisclosure")
                cwd = _str(e.get("cwd")) or (_str(disclosed.get("cwd")) if isinstance(disclosed, dict) else None)
                r.state["cwd"] = r.state["cwd"] or cwd
            elif etype == "context.append_message" and not isinstance(m, dict):
                report.skip("malformed message")
            elif etype == "context.append_message":
                s.touch(ts)
                last_part = None
                steer = text_digest(text_of(m.get("content")).strip())
                if m.get("role") == "user" and steer in r.state["steered"]:
                    steered = list(r.state["steered"])   # the steer, indexed already
                    steered.remove(steer)
                    r.state["steered"] = steered
                else:
                    self._message(s, m, ts, calls, r)
            elif etype == "context.append_loop_event" and isinstance(ev, dict):
                s.touch(ts)
                last_part = self._loop_event(s, ev, ts, calls, last_part, report)
            elif etype == "context.apply_compaction":
                s.add("summary", e.get("summary") if isinstance(e.get("summary"), str) else "", role="compaction", ts=ts)
            elif etype == "turn.steer":   # typed while a turn runs; appended to the context only if it goes on
                text = text_of(e.get("input"))
                if text.strip():
                    s.add("user", text, role="user", ts=ts)
                    r.state["steered"] = (r.state["steered"] + [text_digest(text.strip())])[-50:]
            # A chunk that streamed parts may still extend is not settled (see Resumption.line_done).
            if r.line_done(offset, calls.waiting, calls.give_up, settled=last_part is None):
                break
        r.finish()
        s.cwd = _str(state.get("workDir")) or r.state["cwd"]
        if created and (s.created is None or created < s.created):
            s.created = created
        s.modified = s.modified or norm_time(state.get("updatedAt")) or created
        _finish_times(s, path)
        return s

    def _loop_event(self, s, ev, ts, calls, last_part, report):
        """One `context.append_loop_event` (thinking and text parts, tool calls and results); returns
        the (step, kind) of the chunk that the next streamed part of that step extends, or None."""
        et = self.record_type(report, ev, family="loop event ")
        if et == "content.part" and isinstance(ev.get("part"), dict):
            part = ev["part"]
            kind, text = None, None
            if part.get("type") == "think":
                kind, text = "thinking", part.get("think")
            elif part.get("type") == "text":
                kind, text = "assistant", part.get("text")
            if not kind or not isinstance(text, str):
                return last_part
            key = (ev.get("stepUuid"), kind)
            if last_part == key and s.chunks and s.chunks[-1].kind == kind:
                s.chunks[-1].extend(text)  # consecutive parts of one step: one chunk
                return last_part
            s.add(kind, text, role="assistant", ts=ts)
            return key
        if et == "tool.call":
            cid = _id_key(ev.get("toolCallId") or ev.get("uuid"))
            if cid not in calls.calls:
                calls.call(cid, ev.get("name"), _json_arg(ev.get("args")), ts)
            return None
        if et == "tool.result":
            res = ev.get("result")
            out = res.get("output") if isinstance(res, dict) else res
            err = bool(res.get("isError")) if isinstance(res, dict) else False
            calls.result(ev.get("toolCallId") or ev.get("parentUuid"), _out_text(out), err, ts=ts)
            return None
        return last_part

    @staticmethod
    def _message(s, m, ts, calls, r):
        role, origin = m.get("role"), m.get("origin") if isinstance(m.get("origin"), dict) else {}
        text = text_of(m.get("content"))
        if role == "user":
            # Plan-mode and todo reminders, sub-agent task briefs: written by Kimi, not the human.
            s.add("user" if origin.get("kind", "user") == "user" else "context", text, role="user", ts=ts)
        elif role == "assistant":
            if ("assistant", text_digest(text.strip())) not in r.recent():   # what the loop events streamed
                s.add("assistant", text, role="assistant", ts=ts)
            for c in _list(m.get("toolCalls")):
                if isinstance(c, dict) and c.get("id") not in calls.calls:
                    fn = c.get("function") if isinstance(c.get("function"), dict) else c
                    calls.call(c.get("id"), fn.get("name"), _json_arg(fn.get("arguments")), ts)
        elif role == "tool":
            calls.result(m.get("toolCallId"), text, bool(m.get("isError")), ts=ts)

    # -- kimi-cli (Python) ----------------------------------------------------------------------------

    @staticmethod
    def _share_dir(path):
        """~/.kimi for a file under ~/.kimi/sessions/<md5>/..., else None."""
        parts = os.path.abspath(path).split(os.sep)
        if "sessions" not in parts:
            return None
        return os.sep.join(parts[:len(parts) - 1 - parts[::-1].index("sessions")])

    def _work_dir(self, path, group):
        """The cwd of the sessions folder `group` (md5 of the path, or <kaos>_<md5>), from kimi.json."""
        share = self._share_dir(path)
        meta = (_read_json(os.path.join(share, "kimi.json")) if share else None) or {}
        import hashlib
        for wd in _list(meta.get("work_dirs")):
            p = wd.get("path") if isinstance(wd, dict) else None
            if isinstance(p, str) and p:
                digest = hashlib.md5(p.encode("utf-8")).hexdigest()
                if group in (digest, "%s_%s" % (wd.get("kaos"), digest)):
                    return p
        return None

    def _parse_wire(self, path, report, resume, limit):
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.basename(os.path.dirname(folder)) == "subagents":   # <session>/subagents/<agentId>/
            session_dir = os.path.dirname(os.path.dirname(folder))
            s = Session(self.id, "%s/%s" % (os.path.basename(session_dir), os.path.basename(folder)), path)
            s.parent = os.path.basename(session_dir)
            meta = _read_json(os.path.join(folder, "meta.json")) or {}
            s.name = _str(meta.get("description"))
        else:
            session_dir = folder
            s = Session(self.id, os.path.basename(folder), path)
            # state.json; older 1.x releases kept the title in metadata.json
            state = _read_json(os.path.join(folder, "state.json")) or {}
            legacy = _read_json(os.path.join(folder, "metadata.json")) or {}
            title = _str(state.get("custom_title")) or _str(legacy.get("title"))
            if title and title != "Untitled" and (state.get("title_generated") or legacy.get("title_generated")):
                s.name = title
        s.cwd = self._work_dir(path, os.path.basename(os.path.dirname(session_dir)))
        own_wires = os.path.isdir(os.path.join(folder, "subagents"))   # sub-agents keep their own wire
        r = Resumption(s, resume, limit)
        subs = {None: [s, ToolCalls(s), None]}   # task call id -> [session, its calls, the kind parts extend]
        tasks = {}   # Task call id -> its description
        seen = {"ids": set(), "context": None}   # the session's call ids read; context.jsonl's calls once read
        streaming = {}   # task call id (None: the session) -> [call id, name, arguments so far] of its last call
        for offset, e in iter_jsonl(path, report, r.start):
            m = e.get("message")
            if isinstance(m, dict):
                ts = norm_time(e.get("timestamp"))
                key, p = None, m.get("payload") if isinstance(m.get("payload"), dict) else {}
                if m.get("type") == "SubagentEvent":
                    self.record_type(report, m)
                    # Later releases name the sub-agent (agent_id) whose own wire holds these events.
                    if own_wires or "task_tool_call_id" not in p or not isinstance(p.get("event"), dict):
                        m = None
                    else:
                        key, m = str(p.get("task_tool_call_id")), p["event"]
                    if m is not None and key not in subs:
                        if resume:   # a sub-agent's first event: a second session in the file
                            raise ReadAgain()
                        child = Session(self.id, "%s/%s" % (s.session_id, key), path)
                        child.parent, child.cwd = s.session_id, s.cwd
                        subs[key] = [child, ToolCalls(child), None]
                if m is not None:
                    sub = subs[key]
                    sub[0].touch(ts)
                    if key is None:
                        self._call_before(m, sub[1], ts, folder, seen)
                    sub[2] = self._wire_event(sub[0], m, ts, sub[1], sub[2], report)
                    self._streamed_arguments(m, key, sub[1], streaming, tasks)
            elif e.get("type") != "metadata":
                report.skip("unknown line")
            # A chunk that streamed parts may still extend is not settled (see Resumption.line_done).
            top = subs[None]
            if r.line_done(offset, top[1].waiting, top[1].give_up, settled=top[2] is None) and len(subs) == 1:
                break
        out = [s]
        if len(subs) == 1:
            r.finish()
        else:   # sub-agents' sessions: the file is read whole each time (the indexer resumes one session)
            s.complete = True
        for key, (child, _, _) in subs.items():
            if key is not None:
                child.name = tasks.get(key)
                out.append(child)
        for x in out:
            _finish_times(x, path)
        return out

    @staticmethod
    def _call_before(m, calls, ts, folder, seen):
        """A wire can begin with the result of a call it does not hold (a session continued from
        another: the call is in the model's context, context.jsonl beside it, seen in a real 1.3
        session): the call is taken from there, so that the result is shown as that call's."""
        p = m.get("payload") if isinstance(m.get("payload"), dict) else {}
        if m.get("type") == "ToolCall":
            seen["ids"].add(p.get("id"))
            return
        cid = p.get("tool_call_id")
        if m.get("type") != "ToolResult" or not isinstance(cid, str) or cid in seen["ids"] or cid in calls.calls:
            return
        if seen["context"] is None:
            seen["context"] = known = {}
            try:
                for _, line in iter_jsonl(os.path.join(folder, "context.jsonl"), ParseReport()):
                    tool_calls = line.get("tool_calls") if line.get("role") == "assistant" else None
                    for c in tool_calls if isinstance(tool_calls, list) else ():
                        fn = c.get("function") if isinstance(c, dict) and isinstance(c.get("function"), dict) else None
                        if fn is not None and isinstance(c.get("id"), str):
                            known[c["id"]] = (fn.get("name"), _json_arg(fn.get("arguments")))
            except OSError:
                pass
        if cid in seen["context"]:
            calls.call(cid, seen["context"][cid][0], seen["context"][cid][1], ts)

    @staticmethod
    def _streamed_arguments(m, key, calls, streaming, tasks):
        """Protocol 1.3 streams a call's arguments: the ToolCall holds their start (or nothing), each
        ToolCallPart after it adds to them. The call's chunk gets them whole; a Task call's
        description names its sub-agent."""
        p = m.get("payload") if isinstance(m.get("payload"), dict) else {}
        if m.get("type") == "ToolCall":
            fn = p.get("function") if isinstance(p.get("function"), dict) else {}
            raw = fn.get("arguments")
            streaming[key] = [p.get("id"), fn.get("name"), raw if isinstance(raw, str) else ""]
        elif m.get("type") == "ToolCallPart" and key in streaming and isinstance(p.get("arguments_part"), str):
            part, streaming[key][2] = streaming[key][2], None   # (one reference: extended in place, see Chunk.extend)
            part += p["arguments_part"]
            streaming[key][2] = part
        else:
            return
        call_id, name, raw = streaming[key]
        args = _json_arg(raw)
        if isinstance(args, dict):
            calls.arguments(call_id, args)
            if name == "Task":
                tasks[str(call_id)] = _str(args.get("description"))

    def _wire_event(self, s, m, ts, calls, last, report):
        """One kimi-cli wire event; returns the chunk kind that the next streamed ContentPart extends."""
        mtype, p = self.record_type(report, m), m.get("payload") if isinstance(m.get("payload"), dict) else {}
        if mtype in ("TurnBegin", "SteerInput"):
            u = p.get("user_input")
            _add_user(s, u if isinstance(u, str) else text_of(u), ts)
            return None
        if mtype == "ContentPart":
            kind = {"text": "assistant", "think": "thinking"}.get(self.block_type(report, p))
            text = p.get("text") if kind == "assistant" else p.get("think")
            if kind is None:
                return last
            if last == kind and s.chunks and s.chunks[-1].kind == kind and isinstance(text, str):
                s.chunks[-1].extend(text)
                return last
            s.add(kind, text if isinstance(text, str) else "", role="assistant", ts=ts)
            return kind
        if mtype == "ToolCall":
            fn = p.get("function") if isinstance(p.get("function"), dict) else {}
            calls.call(p.get("id"), fn.get("name"), _json_arg(fn.get("arguments")), ts)
            return None
        if mtype == "ToolResult":
            rv = p.get("return_value") if isinstance(p.get("return_value"), dict) else {}
            out = _out_text(rv.get("output"))
            if rv.get("is_error") and isinstance(rv.get("message"), str) and rv["message"] not in out:
                out = (rv["message"] + "\n" + out).strip()   # "Command failed with exit code: 3."
            calls.result(p.get("tool_call_id"), out, bool(rv.get("is_error")), ts=ts)
            return None
        if mtype in ("BtwBegin", "BtwEnd"):   # a side question asked during a turn, and its answer
            if mtype == "BtwBegin":
                s.add("user", p.get("question") if isinstance(p.get("question"), str) else "", role="user", ts=ts)
            else:
                s.add("assistant", p.get("response") if isinstance(p.get("response"), str) else "",
                      role="assistant", ts=ts)
            return None
        if mtype == "PlanDisplay":
            s.add("assistant", p.get("content") if isinstance(p.get("content"), str) else "", role="assistant", ts=ts)
        elif mtype == "QuestionRequest":
            qs = p.get("questions") if isinstance(p.get("questions"), list) else []
            s.add("assistant", "\n".join(q["question"] for q in qs if isinstance(q, dict)
                                         and isinstance(q.get("question"), str)), role="assistant", ts=ts)
        return last

    def _parse_context(self, path, report):
        """kimi-cli 0.x: the context file is the whole session (no times: the file's mtime stands in)."""
        s = Session(self.id, os.path.basename(path)[:-len(".jsonl")], path)
        s.cwd = self._work_dir(path, os.path.basename(os.path.dirname(os.path.abspath(path))))
        calls = ToolCalls(s)
        for _, m in iter_jsonl(path, report):
            role = self.record_type(report, m, key="role", family="role ")
            if role == "user":
                text = text_of(m.get("content"))
                if not _KIMI_CHECKPOINT.match(text):
                    _add_user(s, text, None)
            elif role == "assistant":
                content = m.get("content")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "think":
                        s.add("thinking", block.get("think") if isinstance(block.get("think"), str) else "",
                              role="assistant")
                s.add("assistant", text_of(content), role="assistant")
                for c in _list(m.get("tool_calls")):
                    fn = c.get("function") if isinstance(c, dict) and isinstance(c.get("function"), dict) else {}
                    calls.call(c.get("id") if isinstance(c, dict) else None, fn.get("name"),
                               _json_arg(fn.get("arguments")), None)
            elif role == "tool":   # a failure is only told by the text: "<system>ERROR: Command failed ..."
                out = text_of(m.get("content"))
                calls.result(m.get("tool_call_id"), out, out.lstrip().startswith("<system>ERROR"), ts=None)
        s.created = s.modified = file_mtime_iso(path)
        return s

    def resume_command(self, row):
        sid = row.get("session_id") or ""
        if not sid or "/" in sid:
            return None   # sub-agents cannot be resumed on their own
        path = row.get("path") or ""
        if not path.endswith("wire.jsonl") or os.path.basename(os.path.dirname(os.path.dirname(path))) == "agents":
            return None   # no resume flag documented for Kimi Code; kimi-cli 0.x had only --continue
        cmd = "kimi -r %s" % shell_quote(sid)
        # kimi-cli looks the session up among the current directory's sessions.
        return "cd %s && %s" % (shell_quote(row["cwd"]), cmd) if row.get("cwd") else cmd


# -------------------------------------------------------------------------------------------------
# OpenClaw (openclaw/openclaw, ex-Clawdbot/Moltbot, pi's format): ~/.openclaw/agents/<agentId>/sessions/*.jsonl
# -------------------------------------------------------------------------------------------------


@register
class OpenClawParser(Parser):
    """OpenClaw transcripts: the pi session format (v3) written by OpenClaw's embedded pi agent.

    Header `{type: session, id, version, timestamp, cwd}`, then `message` entries (user, assistant
    with `toolCall` blocks, `toolResult`), `compaction`, `custom_message`... as in pi. OpenClaw
    injects text the human did not type: `custom_message` with `display: false` (runtime context),
    HEARTBEAT.md polls and the `/new`/`/reset` scaffold sent as user messages -> context. Rotated
    `*.jsonl.deleted.*` / `*.jsonl.reset.*` archives are not listed.

    OpenClaw 2026.8.1 moved transcripts into one SQLite database per agent (openclaw/openclaw #98236,
    agent schema 4; `openclaw doctor` imports the JSONL files and removes them):
    `<state>/agents/<agentId>/agent/openclaw-agent.sqlite`, WAL mode, written by the gateway alone.
    `session_windows` has a row per session id (a session key gets a new id at /reset, rollover or
    compaction: each is a session here, as its JSONL file was), with `display_name` and times in ms;
    `transcript_events(session_id, seq, event_json)` holds the same pi entries the JSONL lines did, the
    header among them. From 2026.9.6 (schema 23) a large entry may be stored zstd-compressed instead
    (`event_zstd`, `event_json` NULL; see zstd_decompress). Entries moved to cold storage (opt-in) are
    not in the table, so not indexed. Both stores may hold one session (before and after the import):
    the index keeps one copy.
    """

    id, label, version = "openclaw", "OpenClaw", 5   # (4 read its database: a new version lists the folders again)
    verified = "schema from its source (agent schema 4-23), 2026-11-26"
    records = ("message", "compaction", "branch_summary", "custom_message", "session_info")
    skipped_records = PiParser.skipped_records   # the header, settings and extension state, as in pi
    blocks, skipped_blocks = PiParser.blocks, PiParser.skipped_blocks   # read by read_pi_message

    def default_roots(self, env):
        state = env_path(env, "OPENCLAW_STATE_DIR")
        if state:
            return [os.path.join(state, "agents")]
        home = _home(env)
        return [os.path.join(home, d, "agents") for d in (".openclaw", ".clawdbot", ".moltbot")]

    DB_NAME = "openclaw-agent.sqlite"

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".jsonl") or n == self.DB_NAME, max_depth=2)

    @staticmethod
    def _injected(text):
        low = text.lower()
        if "heartbeat.md" in low and ("read heartbeat.md" in low or "consider outstanding tasks" in low):
            return True
        return "a new session was started via /new" in low or "via /new or /reset" in low

    resumable = True

    def parse(self, path, report, resume=None, limit=None):
        if os.path.basename(path) == self.DB_NAME:
            return self.parse_sessions(path, report)
        header = first_json_line(path)
        if not header or header.get("type") != "session" or not isinstance(header.get("id"), str):
            raise NotASessionFile("no OpenClaw/pi session header")
        s = Session(self.id, header["id"], path)
        self._header(s, header)
        r = Resumption(s, resume, limit, name=None)
        s.touch(norm_time(header.get("timestamp")))
        tools = ToolCalls(s)
        for offset, e in iter_jsonl(path, report, r.start):
            self._entry(s, e, report, tools, r.state)
            if r.line_done(offset, tools.waiting, tools.give_up):
                break
        r.finish()
        s.name = r.state["name"]
        _finish_times(s, path)
        return [s]

    @staticmethod
    def _header(s, header):
        s.cwd = _str(header.get("cwd"))
        s.parent = header.get("parentSession") or header.get("branchedFrom")

    def _entry(self, s, e, report, tools, state):
        """One pi entry (a JSONL line, or a transcript_events row): its chunks; a name goes to state."""
        etype = self.record_type(report, e)
        ts = norm_time(e.get("timestamp"))
        m = e.get("message")
        if etype == "message" and not isinstance(m, dict):
            report.skip("malformed entry")
        elif etype == "message":
            mts = norm_time(m.get("timestamp")) or ts
            s.touch(mts)
            role = m.get("role")
            if role == "user":
                text = text_of(m.get("content"))
                s.add("context" if self._injected(text) else "user", text, role="user", ts=mts)
            elif role in ("assistant", "toolResult", "bashExecution"):
                read_pi_message(s, m, role, mts, tools, report)
            elif role == "system":
                s.add("context", text_of(m.get("content")), role="system", ts=mts)
        elif etype in ("compaction", "branch_summary"):
            s.add("summary", e.get("summary") if isinstance(e.get("summary"), str) else "", role=etype, ts=ts)
        elif etype == "custom_message":
            kind = "context" if e.get("display") is False else "custom"
            s.add(kind, text_of(e.get("content")), role="custom", ts=ts)
        elif etype == "session_info" and _str(e.get("name")):
            state["name"] = e["name"].strip()

    def session_marks(self, path):
        if os.path.basename(path) != self.DB_NAME:
            return None   # a JSONL transcript: read on from its checkpoint instead
        with AgentStore(path) as con:
            if not {"session_windows", "transcript_events"} <= _table_names(con):
                return None   # (parse says what is wrong with it)
            have = set(_db_columns(con, "session_windows"))
            cols = _pick(have, ("updated_at", "transcript_updated_at", "display_name", "spawned_by"), "w.")
            # A transcript rewritten in place moves transcript_updated_at; an append, the count and last seq.
            return {sid: list(rest) for sid, *rest in con.execute(
                "SELECT w.session_id, %s, (SELECT count(*) FROM transcript_events e WHERE e.session_id = w.session_id), "
                "(SELECT max(seq) FROM transcript_events e WHERE e.session_id = w.session_id) FROM session_windows w"
                % cols) if isinstance(sid, str)}

    def parse_sessions(self, path, report, only=None):   # (only=None: the whole store, for parse)
        with AgentStore(path) as con:
            if not {"session_windows", "transcript_events"} <= _table_names(con):
                raise NotASessionFile("unknown schema: no session_windows/transcript_events tables")
            have = set(_db_columns(con, "session_windows"))
            cols = _pick(have, ("session_id", "session_key", "display_name", "created_at", "updated_at", "spawned_by"))
            windows = con.execute("SELECT %s FROM session_windows ORDER BY created_at, session_id" % cols).fetchall()
            # A sub-agent names the session key that spawned it: its parent is that key's current session.
            current = {}
            if "session_nodes" in _table_names(con) and {"session_key", "current_session_id"} <= set(
                    _db_columns(con, "session_nodes")):
                current = dict(con.execute("SELECT session_key, current_session_id FROM session_nodes"))
            packed = "event_zstd" in _db_columns(con, "transcript_events")
            sql = "SELECT event_json, %s FROM transcript_events WHERE session_id = ? ORDER BY seq" % (
                "event_zstd" if packed else "NULL")
            sessions = []
            for sid, key, title, created, updated, spawned_by in windows:
                if not isinstance(sid, str) or not sid:
                    report.skip("session row without an id")
                    continue
                if only is not None and sid not in only:
                    continue
                s = Session(self.id, sid, path)
                tools, state = ToolCalls(s), {"name": None}
                for text, blob in con.execute(sql, (sid,)):
                    if text is None and blob is not None:
                        try:
                            text = zstd_decompress(bytes(blob))
                        except NotASessionFile as e:   # no zstd here: that entry alone is left out
                            report.skip(str(e))
                            continue
                    e = _json_value(text)
                    if not isinstance(e, dict):
                        report.skip("malformed entry")
                    elif e.get("type") == "session":
                        self._header(s, e)
                        s.touch(norm_time(e.get("timestamp")))
                    else:
                        self._entry(s, e, report, tools, state)
                tools.give_up()
                s.name = state["name"] or _str(title)
                if not s.parent and spawned_by and current.get(spawned_by) != sid:
                    s.parent = current.get(spawned_by)
                s.touch(norm_time(created))
                s.touch(norm_time(updated))
                _finish_times(s, path)
                sessions.append(s)
            return sessions


# -------------------------------------------------------------------------------------------------
# Grok CLI: xAI's (xai-org/grok-build) ~/.grok/sessions/<encoded cwd>/<sessionId>/chat_history.jsonl + summary.json;
# superagent-ai/grok-cli's ~/.grok/grok.db
# -------------------------------------------------------------------------------------------------


@register
class GrokParser(Parser):
    """Grok CLI transcripts (`chat_format_version` 1).

    `chat_history.jsonl` lines: `system` (the system prompt, not indexed), `user` (parts; a
    `synthetic_reason` marks injected context such as `<user_info>`), `assistant` (string content +
    `tool_calls[{id, name, arguments: JSON string}]`), `reasoning` (readable `summary[]`;
    `encrypted_content` is opaque), `tool_result` (by `tool_call_id`), `backend_tool_call` (server-side
    web search). The records have no time: `summary.json` beside them gives id, cwd, title
    (generated_title > session_summary) and created/updated times. `updates.jsonl` repeats the same
    conversation and is never read. A sub-agent is its own session folder; the parent's
    `subagents/<child>/meta.json` names `parent_session_id`. (That is xAI's Grok CLI, grok-build.)

    The other Grok CLI (superagent-ai/grok-cli, `grok-dev` 1.0 on, March 2026) keeps its sessions
    in `~/.grok/grok.db` (SQLite, WAL; src/storage/migrations.ts): `sessions(id, title, cwd_at_start,
    cwd_last, created_at, updated_at ISO)`, and `messages(session_id, seq, role, message_json)`, each an
    AI SDK message: content a string or parts (`text`, `reasoning`, `tool-call {toolCallId, toolName,
    input}`, `tool-result {toolCallId, output: {type, value}}`, images and files left out). The
    system prompt is not stored; a `system` row is a background task's notice (context).
    """

    id, label, version = "grok", "Grok CLI", 3
    records = ("user", "assistant", "reasoning", "tool_result", "backend_tool_call", "tool")
    skipped_records = ("system",)   # the system prompt
    blocks, skipped_blocks = ("text", "reasoning", "tool-call", "tool-result"), ("image", "file")

    def default_roots(self, env):
        home = agent_dir(env, "GROK_HOME", ".grok")
        return [os.path.join(home, "sessions"), os.path.join(_home(env), ".grok", "grok.db")]

    def list_files(self, root):
        if os.path.isfile(root):   # superagent's database (or a configured file)
            return [root] if root.endswith(".db") else []
        # bucket/session/chat_history.jsonl only: deeper copies (subagents/, compaction/) are not sessions
        return walk_files(root, lambda n: n == "chat_history.jsonl", max_depth=2)

    def resume_command(self, row):
        # superagent's `grok -s ID` continues a saved session (src/index.ts)
        if row.get("path", "").endswith(".db") and row.get("session_id"):
            return "%sgrok -s %s" % ("cd %s && " % shell_quote(row["cwd"]) if row.get("cwd") else "",
                                    shell_quote(row["session_id"]))
        return None

    def session_marks(self, path):
        if not path.endswith(".db"):
            return None
        with AgentStore(path) as con:
            if not {"sessions", "messages"} <= _table_names(con):
                return None
            return {sid: [updated, title, n, last] for sid, updated, title, n, last in con.execute(
                "SELECT s.id, s.updated_at, s.title, (SELECT count(*) FROM messages m WHERE m.session_id = s.id), "
                "(SELECT max(seq) FROM messages m WHERE m.session_id = s.id) FROM sessions s")}

    def parse_sessions(self, path, report, only=None):   # (only=None: the whole store, for parse)
        with AgentStore(path) as con:
            if not {"sessions", "messages"} <= _table_names(con):
                raise NotASessionFile("unknown schema: no sessions/messages tables")
            have = set(_db_columns(con, "sessions"))
            cols = _pick(have, ("id", "title", "cwd_at_start", "cwd_last", "created_at", "updated_at"))
            rows = con.execute("SELECT %s FROM sessions ORDER BY created_at, id" % cols).fetchall()
            sessions = []
            for sid, title, cwd_start, cwd_last, created, updated in rows:
                if not isinstance(sid, str) or (only is not None and sid not in only):
                    continue
                s = Session(self.id, sid, path)
                s.name, s.cwd = _str(title), _str(cwd_start) or _str(cwd_last)
                calls = ToolCalls(s)
                for role, raw, ts in con.execute("SELECT role, message_json, created_at FROM messages "
                                                 "WHERE session_id = ? ORDER BY seq", (sid,)):
                    m = _json_value(raw)
                    if not isinstance(m, dict):
                        report.skip("malformed message row")
                        continue
                    self._sdk_message(s, calls, self.record_type(report, {"type": role}), m.get("content"),
                                      norm_time(ts), report)
                calls.give_up()
                s.touch(norm_time(created))
                s.touch(norm_time(updated))
                _finish_times(s, path)
                sessions.append(s)
            return sessions

    def _sdk_message(self, s, calls, role, content, ts, report):
        if role == "system":
            s.add("context", text_of(content) if isinstance(content, list) else str(content or ""), role="system", ts=ts)
            return
        for part in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
            if not isinstance(part, dict):
                continue
            ptype = self.block_type(report, part)
            if ptype == "text" and isinstance(part.get("text"), str):
                s.add("user" if role == "user" else "assistant", part["text"], role=role, ts=ts)
            elif ptype == "reasoning" and isinstance(part.get("text"), str):
                s.add("thinking", part["text"], role="assistant", ts=ts)
            elif ptype == "tool-call":
                calls.call(part.get("toolCallId"), part.get("toolName"), part.get("input"), ts)
            elif ptype == "tool-result":
                out = part.get("output") if isinstance(part.get("output"), dict) else {"value": part.get("output")}
                value = out.get("value")
                failed = str(out.get("type", "")).startswith("error")
                if isinstance(value, dict) and ("output" in value or "error" in value):   # grok's ToolResult
                    failed = failed or value.get("success") is False
                    value = value.get("error") if failed and value.get("error") else value.get("output")
                calls.result(part.get("toolCallId"), _out_text(value), failed)

    def parse(self, path, report):
        if path.endswith(".db"):
            return self.parse_sessions(path, report)
        head = first_json_line(path)
        if not head or head.get("type") not in ("system", "user", "assistant", "reasoning", "tool_result"):
            raise NotASessionFile("no Grok chat_history records")
        sdir = os.path.dirname(path)
        summary = _read_json(os.path.join(sdir, "summary.json")) or {}
        info = summary.get("info") if isinstance(summary.get("info"), dict) else {}
        s = Session(self.id, _str(info.get("id")) or os.path.basename(sdir), path)
        s.cwd = _str(info.get("cwd")) or _str(summary.get("git_root_dir"))
        s.name = _str(summary.get("generated_title")) or _str(summary.get("session_summary"))
        s.parent = _str(summary.get("parent_session_id")) or self._parent_from_siblings(sdir)
        created = norm_time(summary.get("created_at"))
        modified = norm_time(summary.get("last_active_at")) or norm_time(summary.get("updated_at"))
        calls = ToolCalls(s)
        for _, e in iter_jsonl(path, report):
            etype = self.record_type(report, e)
            if etype == "user":
                parts = e.get("content")
                text = text_of(parts) if isinstance(parts, list) else (parts if isinstance(parts, str) else "")
                s.add("context" if e.get("synthetic_reason") else "user", text, role="user")
            elif etype == "assistant":
                if isinstance(e.get("content"), str):
                    s.add("assistant", e["content"], role="assistant")
                for c in _list(e.get("tool_calls")):
                    if isinstance(c, dict):
                        calls.call(c.get("id"), c.get("name"), _json_arg(c.get("arguments")), None)
            elif etype == "reasoning":
                summ = e.get("summary")
                if isinstance(summ, list):
                    s.add("thinking", "\n".join(p.get("text") for p in summ
                                                if isinstance(p, dict) and isinstance(p.get("text"), str)),
                          role="assistant")
            elif etype == "tool_result":
                calls.result(e.get("tool_call_id"), _out_text(e.get("content")), bool(e.get("is_error")))
            elif etype == "backend_tool_call":
                kind = e.get("kind") if isinstance(e.get("kind"), dict) else {}
                name = str(kind.get("tool_type") or "backend_tool")
                action = kind.get("action")
                s.add("tool", tool_text(name, action if isinstance(action, dict) else None), role="assistant", tool=name)
        s.created = created or modified
        s.modified = modified or created
        _finish_times(s, path)
        return [s]

    @staticmethod
    def _parent_from_siblings(sdir):
        sid, bucket = os.path.basename(sdir), os.path.dirname(sdir)
        try:
            siblings = sorted(os.listdir(bucket))
        except OSError:
            return None
        for sib in siblings:
            if sib == sid:
                continue
            meta = os.path.join(bucket, sib, "subagents", sid, "meta.json")
            if os.path.exists(meta):
                m = _read_json(meta) or {}
                return _str(m.get("parent_session_id")) or sib
        return None


# -------------------------------------------------------------------------------------------------
# Hermes (Nous Research): ~/.hermes/state.db (SQLite), legacy ~/.hermes/sessions/session_*.json, §12
# -------------------------------------------------------------------------------------------------


@register
class HermesParser(Parser):
    """Hermes agent sessions.

    `state.db` (SQLite, WAL): `sessions(id, source, model_config JSON with cwd, started_at,
    ended_at (epoch s), title, parent_session_id)` and `messages(session_id, role, content,
    tool_call_id, tool_calls JSON, tool_name, timestamp, reasoning, display_kind)`. Compression and
    sub-agents create child sessions linked by `parent_session_id`. Legacy JSON files: `{session_id,
    session_start, last_updated, cwd | model_config.cwd, messages[]}` with OpenAI-style messages;
    the gateway (Telegram...) also writes `sessions/<id>.jsonl`, a `session_meta` line then one
    message per line. Skill preambles (`[SYSTEM: The user has invoked ...`) and hidden rows are context.

    One session, several files: Hermes keeps a session in state.db and, for the same id, may keep
    `sessions/session_<id>.json` and `sessions/<id>.jsonl` beside it (seen in two real homes: 16
    sessions). The copies disagree (each holds messages the others lack; the JSON's times are naive
    local time, the db's epoch seconds), so the db owns the session: its title, times, cwd and
    parent, its messages, and the messages of the copies it lacks, put after the last message both
    hold. A copy whose id the db holds yields nothing (its store beside it is a sidecar: a session
    appearing in the db takes it over); a copy without one is a session of its own. The db is read
    again when it changes or when a copy appears or goes (the folder's time); a copy changing alone
    is seen with the db's next write (run_agent's _persist_session writes the JSON log and the db's
    new messages together).
    """

    id, label, version = "hermes", "Hermes", 3
    verified = "0.19.0, 2026-11-25"
    records = ("user", "assistant", "tool", "system")   # message roles (rows of state.db, legacy JSON)
    skipped_records = ("session_meta",)   # the legacy JSON's tools and settings, no conversation

    def default_roots(self, env):
        home = agent_dir(env, "HERMES_HOME", ".hermes")
        return [os.path.join(home, "state.db"), os.path.join(home, "sessions")]

    def retention(self, env):
        """Hermes prunes ended sessions older than sessions.retention_days (90) when auto_prune is on."""
        config = os.path.join(agent_dir(env, "HERMES_HOME", ".hermes"), "config.yaml")
        try:
            with open_regular(config, text=True) as f:
                text = f.read(1 << 20)
        except OSError:
            return None
        # The two keys of the `sessions:` block, read without a YAML parser (stdlib has none).
        block = re.search(r"(?m)^sessions:[ \t]*\n((?:[ \t]+.*\n?)*)", text)
        if not block or not re.search(r"(?m)^\s+auto_prune:\s*(true|yes|on)\b", block.group(1), re.I):
            return None
        days = re.search(r"(?m)^\s+retention_days:\s*(\d+)", block.group(1))
        return {"days": int(days.group(1)) if days else 90, "setting": "sessions.retention_days in %s" % config}

    def list_files(self, root):
        if os.path.isfile(root):
            return [root] if root.endswith((".db", ".json", ".jsonl")) else []
        return walk_files(root, lambda n: n == "state.db" or n.endswith(".jsonl")
                          or (n.endswith(".json") and n.startswith("session")), max_depth=1)

    def new_run(self, state_dir=None):
        self._store_ids = {}

    @staticmethod
    def _store_beside(path):
        """The state.db of the Hermes home whose sessions/ folder holds this copy."""
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "state.db")

    @staticmethod
    def _copy_id(path):
        """The session id a copy's file name says: session_<id>.json, <id>.jsonl."""
        name = os.path.basename(path)
        if name.endswith(".jsonl"):
            return name[:-len(".jsonl")]
        return name[len("session_"):-len(".json")] if name.startswith("session_") else None

    def sidecars(self, path):
        if path.endswith(".db"):
            return [os.path.join(os.path.dirname(path), "sessions")]
        store = self._store_beside(path)
        return [store, store + "-wal"]

    def _held_by_store(self, path):
        """Whether the state.db beside this copy holds its session (then the db indexes it)."""
        store = self._store_beside(path)
        try:
            st = stat_file(store, self)
        except OSError:
            return False
        cache = self.__dict__.setdefault("_store_ids", {})
        key = (store, st.st_size, st.st_mtime_ns)
        if key not in cache:
            try:
                con = open_agent_db(store)
                try:
                    cache[key] = {str(r[0]) for r in con.execute("SELECT id FROM sessions")}
                finally:
                    con.close()
            except (OSError, sqlite3.DatabaseError, NotASessionFile):
                cache[key] = set()
        return self._copy_id(path) in cache[key]

    def _copies(self, store, held):
        """{session id: [messages]} of the copies in the sessions/ folder beside a state.db, of the
        sessions it holds (`held`)."""
        folder = os.path.join(os.path.dirname(store), "sessions")
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return {}
        copies = {}
        for name in names:
            path = os.path.join(folder, name)
            sid = self._copy_id(path) if name.endswith((".json", ".jsonl")) else None
            if sid not in held:
                continue
            try:
                messages = self._copy_messages(path, ParseReport())[1]
            except (OSError, NotASessionFile):
                continue
            copies.setdefault(sid, []).append(messages)
        return copies

    def _copy_messages(self, path, report):
        """(the session's own fields, its messages) of a JSON or gateway JSONL copy."""
        if path.endswith(".jsonl"):
            head = first_json_line(path)
            if not head or head.get("role") != "session_meta":
                raise NotASessionFile("no Hermes session_meta line")
            messages = [m for _, m in iter_jsonl(path, report) if m.get("role") != "session_meta"]
            return dict(head, session_id=self._copy_id(path)), messages
        with open_regular(path) as f:
            magic = f.read(16)
        if not magic.lstrip(LINE_START).startswith(b"{"):
            raise NotASessionFile("neither a Hermes state.db nor a session JSON")
        d = _read_json(path, limit=512 << 20)
        if not d or not isinstance(d.get("session_id"), str) or not isinstance(d.get("messages"), list):
            raise NotASessionFile("no Hermes session_id/messages")
        return d, d["messages"]

    @staticmethod
    def _merge_copy(rows, copy):
        """The db's messages of a session (rows: (message, time, tool calls, hidden)) with those of a
        copy that the db lacks, each put after the last message both hold (matched by role and text,
        in order). A copy's message takes no time: its times are naive local time."""
        def key(m):
            content = m.get("content")
            return m.get("role"), (content if isinstance(content, str) else text_of(content)).strip()
        keys = [key(r[0]) for r in rows]
        out, used, pos = list(rows), [False] * len(rows), 0
        for m in copy:
            if not isinstance(m, dict):
                continue
            k = key(m)
            for i in range(pos, len(out)):
                if not used[i] and keys[i] == k:
                    used[i], pos = True, i + 1
                    break
            else:
                out.insert(pos, (m, None, None, False))
                keys.insert(pos, k)
                used.insert(pos, True)
                pos += 1
        return out

    @staticmethod
    def _preamble(text):
        low = text.lower()
        return any(k in low for k in ("[system: the user has invoked", "[skill directory:",
                                      "resolve any relative paths in this skill"))

    def parse(self, path, report):
        with open_regular(path) as f:
            magic = f.read(16)
        if magic.startswith(b"SQLite format 3"):
            return self._db(path, report)
        d, messages = self._copy_messages(path, report)
        if self._held_by_store(path):
            return []   # the db beside it indexes this session, with what only this copy holds
        s = Session(self.id, d["session_id"], path)
        mc = d.get("model_config") if isinstance(d.get("model_config"), dict) else {}
        cwd = _str(d.get("cwd")) or _str(mc.get("cwd"))
        s.cwd = os.path.expanduser(cwd) if cwd else None  # Hermes writes ~ and expands it itself
        s.name = _str(d.get("title"))
        s.created = norm_time(d.get("session_start"))
        s.modified = norm_time(d.get("last_updated")) or s.created
        s.created = s.created or s.modified
        calls = ToolCalls(s)
        for m in messages:
            if isinstance(m, dict):
                ts = norm_time(m.get("timestamp"))
                s.touch(ts)
                self._message(s, m, ts, calls, report)
            else:
                report.skip("malformed message")
        _finish_times(s, path)
        return [s]

    def _message(self, s, m, ts, calls, report, tool_calls=None, hidden=False):
        role = self.record_type(report, m, key="role", family="role ")
        content = m.get("content")
        text = content if isinstance(content, str) else text_of(content)
        reasoning = m.get("reasoning") or m.get("reasoning_content")
        if role == "user":
            s.add("context" if hidden or self._preamble(text) else "user", text, role="user", ts=ts)
        elif role == "assistant":
            if isinstance(reasoning, str):
                s.add("thinking", reasoning, role="assistant", ts=ts)
            s.add("context" if hidden else "assistant", text, role="assistant", ts=ts)
            for c in _list(tool_calls if tool_calls is not None else m.get("tool_calls")):
                if isinstance(c, dict):
                    fn = c.get("function") if isinstance(c.get("function"), dict) else c
                    calls.call(c.get("id") or c.get("call_id"), fn.get("name"), _json_arg(fn.get("arguments")), ts)
        elif role == "tool":
            text, failed = self._tool_result(text)
            calls.result(m.get("tool_call_id"), text, failed or m.get("finish_reason") == "error",
                         name=m.get("tool_name"), ts=ts)
        elif role == "system":
            s.add("context", text, role="system", ts=ts)

    @staticmethod
    def _tool_result(text):
        """The terminal tool answers {"output", "exit_code", "error"} as JSON: its output is the text,
        and a non-zero exit code or an error is a failure."""
        if not text.startswith("{") or ('"exit_code"' not in text[:200] and '"exit_code"' not in text[-200:]):
            return text, False
        try:
            r = json.loads(text)
        except BAD_JSON:
            return text, False
        if not isinstance(r, dict) or not isinstance(r.get("output"), str):
            return text, False
        code, error = r.get("exit_code"), r.get("error")
        out = r["output"] + ("\n" + error if isinstance(error, str) and error.strip() else "")
        return out, bool(error) or (isinstance(code, int) and not isinstance(code, bool) and code != 0)

    def _db(self, path, report):
        con = open_agent_db(path)
        try:
            try:
                scols = {r[1] for r in con.execute("PRAGMA table_info(sessions)")}
                mcols = {r[1] for r in con.execute("PRAGMA table_info(messages)")}
            except sqlite3.DatabaseError as e:
                raise store_failure(e)
            if not {"id", "started_at"} <= scols or not {"session_id", "role", "content"} <= mcols:
                raise NotASessionFile("unknown schema: no Hermes sessions/messages tables")
            opt = lambda cols, name: name if name in cols else "NULL"
            sessions = {}
            for row in con.execute("SELECT id, %s, %s, started_at, %s, %s, %s FROM sessions" % (
                    opt(scols, "title"), opt(scols, "model_config"), opt(scols, "ended_at"),
                    opt(scols, "parent_session_id"), opt(scols, "cwd"))):
                sid, title, mconf, started, ended, parent, cwd = row
                if not sid:
                    continue
                s = Session(self.id, str(sid), path)
                s.name = _str(title)
                s.parent = _str(parent)
                try:
                    mc = json.loads(mconf) if isinstance(mconf, str) else {}
                except BAD_JSON:
                    mc = {}
                # 0.19 has a cwd column; older versions kept it in model_config.
                cwd = _str(cwd) or (_str(mc.get("cwd")) if isinstance(mc, dict) else None)
                if cwd:
                    s.cwd = os.path.expanduser(cwd.strip())  # Hermes itself expands ~ here
                s.touch(norm_time(started))
                s.touch(norm_time(ended))
                sessions[s.session_id] = [s, ToolCalls(s)]
            q = "SELECT session_id, role, content, %s, %s, %s, %s, %s, %s FROM messages ORDER BY session_id, %s, id" % (
                opt(mcols, "tool_call_id"), opt(mcols, "tool_calls"), opt(mcols, "tool_name"),
                opt(mcols, "timestamp"), opt(mcols, "reasoning"), opt(mcols, "display_kind"),
                opt(mcols, "timestamp"))
            rows = collections.defaultdict(list)   # session id -> (message, time, tool calls, hidden)
            for sid, role, content, tcid, tcalls, tname, tstamp, reasoning, display in con.execute(q):
                if str(sid) not in sessions:
                    report.skip("message of unknown session")
                    continue
                try:
                    tc = json.loads(tcalls) if isinstance(tcalls, str) and tcalls else []
                except BAD_JSON:
                    tc = []
                m = {"role": role, "content": content, "tool_call_id": tcid, "tool_name": tname,
                     "reasoning": reasoning}
                rows[str(sid)].append((m, norm_time(tstamp), tc if isinstance(tc, list) else [], display == "hidden"))
        finally:
            con.close()
        copies = self._copies(path, sessions)
        out = []
        for sid, (s, calls) in sessions.items():
            messages = rows.get(sid, [])
            for copy in copies.get(sid, ()):
                messages = self._merge_copy(messages, copy)
            for m, ts, tc, hidden in messages:
                s.touch(ts)
                self._message(s, m, ts, calls, report, tool_calls=tc, hidden=hidden)
            _finish_times(s, path)
            out.append(s)
        return out


# -------------------------------------------------------------------------------------------------
# Google Antigravity CLI: ~/.gemini/antigravity-cli/brain/<id>/.system_generated/logs/transcript.jsonl
# -------------------------------------------------------------------------------------------------


@register
class AntigravityParser(Parser):
    """Antigravity (`agy`) transcripts: one JSON step per line.

    `{step_index, source: USER_EXPLICIT|MODEL|SYSTEM, type, status, created_at, content?, thinking?,
    tool_calls?}`. `USER_INPUT` wraps the typed text in `<USER_REQUEST>`; other tags in it (settings
    changes...) are injected -> context. `PLANNER_RESPONSE` holds thinking, answer text and
    `tool_calls[{name, args}]` (arg values are JSON-encoded strings); the tool steps that follow
    (RUN_COMMAND, VIEW_FILE, ...) are their outputs, joined in order since they carry no call id.
    `CHECKPOINT` is a compaction summary; `SYSTEM_MESSAGE` is context. The conversation id is the
    brain folder name. The IDE's markdown artifacts and protobuf conversations are not transcripts.
    """

    id, label, version = "antigravity", "Google Antigravity", 2
    # Steps read for what they say, then the tool steps (named after their tool; a new one is still
    # read as its call's output, and counted so that its name is known).
    records = ("USER_INPUT", "PLANNER_RESPONSE", "CHECKPOINT", "SYSTEM_MESSAGE", "EPHEMERAL_MESSAGE",
               "RUN_COMMAND", "VIEW_FILE", "LIST_DIRECTORY", "CODE_ACTION", "SEARCH_WEB", "GREP_SEARCH",
               "BROWSER_NAVIGATE", "GENERIC")
    skipped_records = ("CONVERSATION_HISTORY",)

    def default_roots(self, env):
        home = _home(env)
        return [os.path.join(home, ".gemini", "antigravity-cli", "brain"),
                os.path.join(home, ".gemini", "antigravity", "brain")]

    def list_files(self, root):
        if os.path.isfile(root):
            return [root] if root.endswith(".jsonl") else []
        found = []
        try:
            convs = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            return []
        for c in convs:
            logs = os.path.join(c.path, ".system_generated", "logs")
            if c.is_dir(follow_symlinks=False) and os.path.isdir(logs):
                found.extend(walk_files(logs, lambda n: n.startswith("transcript") and n.endswith(".jsonl"), 0))
        return found

    PATH_KEYS = ("TargetFile", "AbsolutePath", "FilePath", "DirectoryPath", "SearchPath")

    @staticmethod
    def _decode(v):
        # Antigravity JSON-encodes every argument value: '"/tmp/repo"' -> '/tmp/repo'
        return _json_arg(v, kinds=(dict, list, str, int, float, bool))

    _REQ_RE = LazyPattern(r"<USER_REQUEST>\s*(.*?)\s*</USER_REQUEST>", re.S)

    def parse(self, path, report):
        head = first_json_line(path)
        if not head or "step_index" not in head or not isinstance(head.get("type"), str):
            raise NotASessionFile("no Antigravity transcript steps")
        parts = os.path.abspath(path).split(os.sep)
        stem = os.path.splitext(parts[-1])[0]
        if len(parts) >= 4 and parts[-2] == "logs" and parts[-3] == ".system_generated":
            sid = parts[-4] if stem == "transcript" else "%s/%s" % (parts[-4], stem)
        else:
            sid = stem
        s = Session(self.id, sid, path)
        pending = collections.deque()  # (chunk index, name, args) of calls whose output step has not come yet
        for _, e in iter_jsonl(path, report):
            stype, src = self.record_type(report, e), e.get("source")
            ts = norm_time(e.get("created_at"))
            s.touch(ts)
            content = e.get("content") if isinstance(e.get("content"), str) else ""
            if stype == "USER_INPUT":
                m = self._REQ_RE.search(content)
                if m:
                    s.add("user", m.group(1), role="user", ts=ts)
                    s.add("context", (content[:m.start()] + content[m.end():]).strip(), role="user", ts=ts)
                else:
                    s.add("user" if src == "USER_EXPLICIT" else "context", content, role="user", ts=ts)
            elif stype == "PLANNER_RESPONSE":
                if isinstance(e.get("thinking"), str):
                    s.add("thinking", e["thinking"], role="assistant", ts=ts)
                s.add("assistant", content, role="assistant", ts=ts)
                pending.clear()
                for c in _list(e.get("tool_calls")):
                    if not isinstance(c, dict):
                        continue
                    name = str(c.get("name") or "tool")
                    args = c.get("args")
                    if isinstance(args, dict):
                        args = {k: self._decode(v) for k, v in args.items()}
                    fpath = tool_path(args) or next((args[k] for k in self.PATH_KEYS if isinstance(args, dict)
                                                     and isinstance(args.get(k), str)), None)
                    s.add("tool", tool_text(name, args), role="assistant", tool=name, path=fpath, ts=ts)
                    if s.chunks and s.chunks[-1].tool == name:
                        pending.append((len(s.chunks) - 1, name, args))
            elif stype == "CHECKPOINT":
                s.add("summary", content, role="checkpoint", ts=ts)
            elif stype in ("SYSTEM_MESSAGE", "EPHEMERAL_MESSAGE"):
                s.add("context", content, role="system", ts=ts)
            elif src == "MODEL" and content:
                if pending:
                    idx, name, args = pending.popleft()
                    s.chunks[idx].text = cap_text(tool_text(name, args, content, e.get("status") == "ERROR"), CHUNK_CAP)
                else:
                    name = stype.lower() if isinstance(stype, str) else "tool"
                    s.add("tool", tool_text(name, None, content), role="tool", tool=name, ts=ts)
        _finish_times(s, path)
        return [s]


# -------------------------------------------------------------------------------------------------
# Forks and hosts that write another agent's format: omp (pi's), OpenClaude and Claude Desktop (Claude
# Code's), TraeX (Codex's)
# -------------------------------------------------------------------------------------------------


@register
class OmpParser(PiParser):
    """omp (can1357/oh-my-pi), a fork of pi that writes pi's session format to its own folders.

    `~/.omp/agent/sessions/` (`PI_CONFIG_DIR` renames `.omp`), one more per profile
    (`~/.omp/profiles/<name>/agent/sessions/`, OMP_PROFILE) and `$XDG_DATA_HOME/omp/agent/sessions/`
    where the user opted into the XDG layout (packages/utils/src/dirs.ts). omp keeps completed
    sub-agents' transcripts below their session's folder, so the walk goes deeper than pi's.
    Everything else is pi's parser.
    """

    id, label = "omp", "omp (Oh My Pi)"
    verified = "dirs.ts (source), 2026-11-25"

    def default_roots(self, env):
        root = os.path.join(_home(env), env.get("PI_CONFIG_DIR") or ".omp")
        roots = [os.path.join(root, "agent", "sessions")]
        roots += [os.path.join(p, "agent", "sessions") for p in root_subdirs(env, os.path.join(root, "profiles"))]
        xdg = env_path(env, "XDG_DATA_HOME") or os.path.join(_home(env), ".local", "share")
        if root_isdir(env, os.path.join(xdg, "omp")):
            roots.append(os.path.join(xdg, "omp", "agent", "sessions"))
        return roots

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".jsonl"), max_depth=3)

    def resume_command(self, row):
        return "omp --session %s" % shell_quote(row["path"])


@register
class OpenClaudeParser(ClaudeCodeParser):
    """OpenClaude (Gitlawb/openclaude), a fork of Claude Code for other model providers: Claude Code's
    transcripts, under `~/.openclaude/projects/` instead of `~/.claude/projects/`."""

    id, label = "openclaude", "OpenClaude"
    verified = "layout only, 2026-11-25"
    command = "openclaude"
    session_env = ()

    def default_roots(self, env):
        return [os.path.join(_home(env), ".openclaude", "projects")]

    def retention(self, env):
        """Claude Code's cleanup, with OpenClaude's own settings file."""
        settings = os.path.join(_home(env), ".openclaude", "settings.json")
        days = (_read_json(settings) or {}).get("cleanupPeriodDays", 30)
        if not isinstance(days, (int, float)) or isinstance(days, bool):
            days = 30
        return {"days": days, "setting": "cleanupPeriodDays in %s" % settings}


@register
class TraeXParser(CodexParser):
    """TraeX, the Trae CLI (ByteDance): Codex's rollout format, written to `~/.trae/cli/sessions/` and
    `~/.trae/cli/archived_sessions/` (Codex's layout under another home). Everything is Codex's parser;
    the sessions are TraeX's. (Layout as agentsview's traex reader has it.)"""

    id, label = "traex", "TraeX (Trae CLI)"
    verified = "as agentsview traex.go reads it, 2026-11-25"
    session_env = ()

    def default_roots(self, env):
        home = os.path.join(_home(env), ".trae", "cli")
        return [os.path.join(home, "sessions"), os.path.join(home, "archived_sessions")]

    def resume_command(self, row):
        return None


@register
class ClaudeDesktopParser(ClaudeCodeParser):
    """Claude Desktop's agent mode ("Cowork"): each task runs Claude Code in a folder of its own,
    `local-agent-mode-sessions/<org>/<workspace>/local_<uuid>/.claude/projects/<enc>/<id>.jsonl` (and
    its sub-agents), beside `local_<uuid>.json` (`title`, `userSelectedFolders`, `createdAt`,
    `lastActivityAt` in ms) under Claude Desktop's data folder (macOS `~/Library/Application
    Support/Claude`, Linux `~/.config/Claude`, Windows `%APPDATA%\\Claude`). The transcripts are read
    by Claude Code's parser; the task's title and chosen folder come from the metadata file. (Layout
    as agentsview's cowork reader has it.)"""

    id, label = "claude-desktop", "Claude Desktop (agent mode)"
    session_folders = False   # (its tasks' folders hold whole project trees)
    verified = "as agentsview cowork.go reads it, 2026-11-25"
    session_env = ()

    def default_roots(self, env):
        home = _home(env)
        bases = [os.path.join(home, "Library", "Application Support", "Claude"),
                 os.path.join(env_path(env, "XDG_CONFIG_HOME") or os.path.join(home, ".config"), "Claude")]
        if env.get("APPDATA"):
            bases.append(os.path.join(env["APPDATA"], "Claude"))
        roots = [os.path.join(b, "local-agent-mode-sessions") for b in bases]
        found = [r for r in roots if root_isdir(env, r)]
        return found or roots[:1]

    def list_files(self, root):
        return [p for p in walk_files(root, lambda n: n.endswith(".jsonl") and n != "journal.jsonl", max_depth=10,
                                      skip_dirs=("tool-results", "skills-plugin"))
                if self._meta_path(p)]

    @staticmethod
    def _meta_path(path):
        marker = os.sep + os.path.join(".claude", "projects") + os.sep
        return path.split(marker)[0] + ".json" if marker in path else None

    def sidecars(self, path):
        return [self._meta_path(path)] if self._meta_path(path) else []

    def parse(self, path, report, *args, **kw):
        sessions = super().parse(path, report, *args, **kw)
        meta = _read_json(self._meta_path(path) or "") or {}
        folders = [f for f in _list(meta.get("userSelectedFolders")) if _str(f)]
        for s in sessions:
            if not s.parent:
                s.name = s.name or _str(meta.get("title"))
            s.cwd = folders[0] if folders else s.cwd
        return sessions

    def resume_command(self, row):
        return None

    def retention(self, env):
        return None


# -------------------------------------------------------------------------------------------------
# Continue (continuedev/continue): ~/.continue/sessions/<sessionId>.json + sessions.json
# -------------------------------------------------------------------------------------------------


@register
class ContinueParser(Parser):
    """Continue (the VS Code and JetBrains extension, and its `cn` CLI): one JSON file per session,
    rewritten whole, in `~/.continue/sessions/` (`CONTINUE_GLOBAL_DIR` moves `~/.continue`).

    `{sessionId, title, workspaceDirectory (a file:// URI or path), history: [ChatHistoryItem]}`
    where an item is `{message: {role, content (text or parts), toolCalls?, toolCallId?},
    contextItems: [{name, content}], toolCallState?: {toolCallId, toolCall{function{name,
    arguments}}, status, output: [{content}]} (newer: a list, toolCallStates), reasoning?: {text}}`
    (core/index.d.ts). Roles: user,
    assistant, thinking, tool (a result joined to its call), system (context). The files attached
    to a message (`contextItems`) are context. The session files hold no times: the creation time is
    `dateCreated` (ms) in `sessions.json`, the list of sessions; the last activity is the file's
    time. `sessions.json` itself is not a session. "New Session" is Continue's placeholder title.
    """

    id, label, version = "continue", "Continue", 3
    records = ("user", "assistant", "thinking", "tool", "system")   # message roles
    verified = "core/index.d.ts (source), 2026-11-25"

    def __init__(self):
        self._created = {}   # sessions folder -> {sessionId: dateCreated}, read once per run

    def new_run(self, state_dir=None):
        self._created.clear()

    def default_roots(self, env):
        return [os.path.join(agent_dir(env, "CONTINUE_GLOBAL_DIR", ".continue"), "sessions")]

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".json") and n != "sessions.json", max_depth=0)

    def start_mark(self, root):
        # Continue rewrites a session's file in place (fs.writeFileSync: its folder's time stays) and
        # then sessions.json, the list of sessions, at every save (core/util/history.ts): a change of
        # that list opens a window (see read_journals) in which the resumed old session is found.
        listing = os.path.join(root, "sessions.json")
        return listing if os.path.isfile(listing) else None

    def _dates(self, folder):
        if folder not in self._created:
            listing = _load_json_file_quietly(os.path.join(folder, "sessions.json"))
            self._created[folder] = {e["sessionId"]: e.get("dateCreated") for e in listing or []
                                     if isinstance(e, dict) and isinstance(e.get("sessionId"), str)} \
                if isinstance(listing, list) else {}
        return self._created[folder]

    def parse(self, path, report):
        data = _load_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("history"), list) \
                or not isinstance(data.get("sessionId"), str):
            raise NotASessionFile("no Continue session object")
        s = Session(self.id, data["sessionId"], path)
        title = _str(data.get("title"))
        s.name = title if title and title != "New Session" else None
        s.cwd = file_uri_path(_str(data.get("workspaceDirectory")))
        s.touch(norm_time(self._dates(os.path.dirname(path)).get(data["sessionId"])))
        tools = ToolCalls(s)
        for item in data["history"]:
            m = item.get("message") if isinstance(item, dict) else None
            if not isinstance(m, dict):
                report.skip("malformed history item")
                continue
            role = self.record_type(report, m, key="role", family="role ")
            if role == "user":
                for c in _list(item.get("contextItems")):
                    if isinstance(c, dict) and isinstance(c.get("content"), str):
                        s.add("context", "%s\n%s" % (c.get("name") or "", c["content"]), role="user")
                s.add("user", text_of(m.get("content")), role="user")
            elif role in ("assistant", "thinking"):
                reasoning = item.get("reasoning") if isinstance(item.get("reasoning"), dict) else {}
                s.add("thinking", reasoning.get("text") if isinstance(reasoning.get("text"), str) else "",
                      role="assistant")
                s.add("thinking" if role == "thinking" else "assistant", text_of(m.get("content")), role="assistant")
                for call in _list(m.get("toolCalls")):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict):
                        tools.call(call.get("id"), fn.get("name"), _json_arg(fn.get("arguments")))
                # the calls' states: one `toolCallState`, or (newer) a list `toolCallStates`
                states = item.get("toolCallStates") if isinstance(item.get("toolCallStates"), list) \
                    else [item.get("toolCallState")]
                for state in (st for st in states if isinstance(st, dict) and st.get("toolCallId")):
                    call = state.get("toolCall") if isinstance(state.get("toolCall"), dict) else {}
                    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                    tools.call(state["toolCallId"], fn.get("name"), _json_arg(fn.get("arguments")))
                    output = "\n".join(o["content"] for o in _list(state.get("output"))
                                       if isinstance(o, dict) and isinstance(o.get("content"), str))
                    if output or state.get("status") == "errored":
                        tools.result(state["toolCallId"], output, state.get("status") == "errored")
            elif role == "tool":
                tools.result(m.get("toolCallId"), text_of(m.get("content")))
            elif role == "system":
                s.add("context", text_of(m.get("content")), role="system")
        if s.chunks:
            s.touch(file_mtime_iso(path))
        _finish_times(s, path)
        return [s]


def _load_json_file_quietly(path):
    """A whole JSON file, or None when it is absent, unreadable or not JSON."""
    try:
        return _load_json_file(path)
    except OSError:
        return None


# -------------------------------------------------------------------------------------------------
# Kiro IDE (kirodotdev, built on Continue): <Kiro>/User/globalStorage/kiro.kiroagent
# -------------------------------------------------------------------------------------------------


# What the Kiro IDE puts first in a conversation as the "user": its own prompt, not the user's words.
_KIRO_SYSTEM_PREFIXES = ("# System Prompt", "# Identity", "<identity>", "## Included Rules",
                         "You are operating in a workspace")


@register
class KiroIDEParser(ContinueParser):
    """The Kiro IDE's chats, under its extension folder `globalStorage/kiro.kiroagent` (Linux
    `~/.config/Kiro/User`, macOS `~/Library/Application Support/Kiro/User`, Windows `%APPDATA%\\Kiro\\User`).
    Kiro's agent is built on Continue: `workspace-sessions/<workspace>/<sessionId>.json` are Continue's
    session files (with `sessions.json` beside them) and are read by Continue's parser; the older
    `<workspace hash>/<file hash>.chat` files hold one execution each (`{executionId, chat: [{role,
    content}], metadata: {startTime, endTime, workflow}}`). Kiro's own prompts sent as the first "user"
    messages (system prompt, identity, rules) are context. (Layout as agentsview's kiro_ide reader has it.)
    """

    id, label, version = "kiro-ide", "Kiro IDE", 2
    verified = "as agentsview kiro_ide.go reads it, 2026-11-25"

    def default_roots(self, env):
        home = _home(env)
        bases = [env_path(env, "XDG_CONFIG_HOME") or os.path.join(home, ".config"),
                 os.path.join(home, "Library", "Application Support")]
        if env.get("APPDATA"):
            bases.append(env["APPDATA"])
        roots = [os.path.join(b, "Kiro", "User", "globalStorage", "kiro.kiroagent") for b in bases]
        found = [r for r in roots if root_isdir(env, r)]
        return found or roots[:1]

    def list_files(self, root):
        found = walk_files(root, lambda n: n.endswith(".chat") or (n.endswith(".json") and n != "sessions.json"),
                           max_depth=2)
        return [p for p in found if p.endswith(".chat")
                or os.path.basename(os.path.dirname(os.path.dirname(p))) == "workspace-sessions"]

    def parse(self, path, report):
        sessions = self._chat(path, report) if path.endswith(".chat") else super().parse(path, report)
        for s in sessions:
            for c in s.chunks:
                if c.kind == "user" and c.text.lstrip().startswith(_KIRO_SYSTEM_PREFIXES):
                    c.kind = "context"
        return sessions

    def _chat(self, path, report):
        data = _load_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("chat"), list):
            raise NotASessionFile("no Kiro chat object")
        folder, stem = os.path.basename(os.path.dirname(path)), os.path.basename(path)[:-len(".chat")]
        s = Session(self.id, "%s:%s" % (folder, stem), path)
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        s.name = _str(meta.get("workflow"))
        s.touch(norm_time(meta.get("startTime")))
        s.touch(norm_time(meta.get("endTime")))
        for m in data["chat"]:
            if not isinstance(m, dict):
                report.skip("malformed message")
                continue
            role = self.record_type(report, m, key="role", family="role ")
            kind = {"user": "user", "assistant": "assistant"}.get(role, "context")
            s.add(kind, text_of(m.get("content")), role=str(role))
        _finish_times(s, path)
        return [s]

# -------------------------------------------------------------------------------------------------
# VS Code Copilot Chat (microsoft/vscode): <User>/workspaceStorage/<hash>/chatSessions/<id>.json[l]
# -------------------------------------------------------------------------------------------------


@register
class CopilotChatParser(Parser):
    """GitHub Copilot Chat in VS Code (and Insiders, VSCodium, and forks that keep the same layout):
    the editor's own chat sessions, one file per session, in `workspaceStorage/<hash>/chatSessions/`
    (the project is that folder's `workspace.json`) and `globalStorage/emptyWindowChatSessions/`.

    `<id>.json` (until VS Code 1.10x) is the whole ISerializableChatData: `{version, sessionId,
    creationDate, lastMessageDate, customTitle?, requests: [{requestId, message: {text} | text,
    timestamp, response: [parts]}]}`. `<id>.jsonl` (newer) is an ObjectMutationLog of the same object
    (src/vs/workbench/contrib/chat/common/model/objectMutationLog.ts): a first line
    `{kind: 0, v: state}`, then `{kind: 1, k: path, v}` (set), `{kind: 2, k: path, v: [items], i?}`
    (truncate the array at i, then push) and `{kind: 3, k: path}` (delete), replayed in order; when
    both files exist the .jsonl is the live one and the .json is not listed. Response parts: Markdown
    (`{value}` or `{kind: markdownContent, content: {value}}`), `thinking`, `inlineReference` (a
    file named inside the answer), `toolInvocationSerialized` (toolId, the invocation message, a
    terminal command, the result's input/output), `textEditGroup` (an edit to a file); progress and
    UI parts are skipped. The title is the user's rename (customTitle).
    """

    id, label, version = "copilot-chat", "VS Code Copilot Chat", 2
    verified = "chatModel.ts, objectMutationLog.ts (source), 2026-11-25"

    # response parts by `kind` (Markdown parts have none)
    records = ("markdownContent", "inlineReference", "thinking", "toolInvocationSerialized", "textEditGroup")
    skipped_records = frozenset({
        "undoStop", "prepareToolInvocation", "codeblockUri", "progressMessage", "progressTaskSerialized",
        "confirmation", "command", "warning", "mcpServersStarting", "elicitation", "elicitationSerialized",
        "treeData", "extensions", "pullRequest", "notebookEditGroup", "multiDiffData", "questionCarousel",
        "toolInvocation", "progressTask", "clearToPreviousToolInvocation", "references", "codeCitation",
        "planReview", "workspaceEdit", "hook", "disabledClaudeHooks",
    })

    def default_roots(self, env):
        roots = []
        for user in vscode_user_dirs(env) or [os.path.dirname(_primary_global_storage(env))]:
            roots.append(os.path.join(user, "workspaceStorage"))
            roots.append(os.path.join(user, "globalStorage", "emptyWindowChatSessions"))
        return roots

    def list_files(self, root):
        if os.path.basename(root.rstrip(os.sep)) == "emptyWindowChatSessions":
            files = walk_files(root, self._session_name, max_depth=0)
        else:
            files = [p for p in walk_files(root, self._session_name, max_depth=2)
                     if os.path.basename(os.path.dirname(p)) == "chatSessions"]
        live = set(files)
        return [p for p in files if not (p.endswith(".json") and p + "l" in live)]

    @staticmethod
    def _session_name(name):
        return name.endswith(".json") or name.endswith(".jsonl")

    def sidecars(self, path):
        folder = os.path.dirname(os.path.dirname(path))
        return [os.path.join(folder, "workspace.json")] if os.path.basename(os.path.dirname(path)) == "chatSessions" else []

    def parse(self, path, report):
        data = self._replay(path, report) if path.endswith(".jsonl") else _load_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
            raise NotASessionFile("no VS Code chat session")
        sid = _str(data.get("sessionId")) or os.path.basename(path).rsplit(".", 1)[0]
        s = Session(self.id, sid, path)
        s.name = _str(data.get("customTitle"))
        s.cwd = self._workspace(path)
        s.touch(norm_time(data.get("creationDate")))
        s.touch(norm_time(data.get("lastMessageDate")))
        for r in data["requests"]:
            if not isinstance(r, dict):
                report.skip("malformed request")
                continue
            ts = norm_time(r.get("timestamp"))
            s.touch(ts)
            msg = r.get("message")
            s.add("user", msg if isinstance(msg, str) else (msg or {}).get("text") if isinstance(msg, dict) else "",
                  role="user", ts=ts)
            self._response(s, r.get("response"), ts, report)
        _finish_times(s, path)
        return [s]

    @staticmethod
    def _replay(path, report):
        """The state an ObjectMutationLog file describes (see the class docstring)."""
        state = None
        for _, e in iter_jsonl(path, report):
            kind, keys = e.get("kind"), e.get("k")
            if kind == 0:
                state = e.get("v")
                continue
            if state is None or not isinstance(keys, list):
                report.skip("mutation before the initial state")
                continue
            if not keys:
                if kind == 1:
                    state = e.get("v")
                continue
            parent = state
            try:
                for k in keys[:-1]:
                    parent = parent[k]
                last = keys[-1]
                if kind == 1:
                    parent[last] = e.get("v")
                elif kind == 3:
                    if isinstance(parent, dict):
                        parent.pop(last, None)
                    else:
                        parent[last] = None
                elif kind == 2:
                    arr = parent.get(last) if isinstance(parent, dict) else parent[last]
                    arr = arr if isinstance(arr, list) else []
                    if isinstance(e.get("i"), int):
                        del arr[e["i"]:]
                    arr.extend(_list(e.get("v")))
                    parent[last] = arr
                else:
                    report.unrecognized("mutation kind %s" % kind)
            except (KeyError, IndexError, TypeError):
                report.skip("mutation of a missing path")
        return state

    def _workspace(self, path):
        folder = os.path.dirname(os.path.dirname(path))
        if os.path.basename(os.path.dirname(path)) != "chatSessions":
            return None
        ws = _read_json(os.path.join(folder, "workspace.json")) or {}
        if isinstance(ws.get("folder"), str):
            return file_uri_path(ws["folder"])
        workspace = file_uri_path(ws.get("workspace"))   # a .code-workspace file: its folder
        return os.path.dirname(workspace) if workspace else None

    def _response(self, s, parts, ts, report):
        text = []

        def flush():
            s.add("assistant", "".join(text), role="assistant", ts=ts)
            text.clear()

        for p in parts if isinstance(parts, list) else []:
            if not isinstance(p, dict):
                continue
            kind = p.get("kind")
            if kind is not None:
                kind = self.record_type(report, p, key="kind", family="response part ")
            if kind is None or kind == "markdownContent":
                value = p.get("value") if kind is None else (p.get("content") or {}).get("value") \
                    if isinstance(p.get("content"), dict) else None
                if isinstance(value, str):
                    text.append(value)
            elif kind == "inlineReference":
                ref = p.get("inlineReference") if isinstance(p.get("inlineReference"), dict) else {}
                uri = ref.get("uri") if isinstance(ref.get("uri"), dict) else ref   # a Location or a URI
                where = uri.get("fsPath") or uri.get("path")
                name = p.get("name") or ref.get("name") or (os.path.basename(where) if isinstance(where, str) else None)
                if isinstance(name, str) and name:
                    text.append("`%s`" % name)
            elif kind == "thinking":
                value = p.get("value")
                value = "".join(v for v in value if isinstance(v, str)) if isinstance(value, list) else value
                if isinstance(value, str):
                    flush()
                    s.add("thinking", value, role="assistant", ts=ts)
            elif kind == "toolInvocationSerialized":
                flush()
                self._tool(s, p, ts)
            elif kind == "textEditGroup":
                flush()
                target = p.get("uri") if isinstance(p.get("uri"), dict) else {}
                path = target.get("fsPath") or target.get("path")
                s.add("tool", tool_text("edit", {"path": path}), role="assistant", tool="edit", path=path, ts=ts)
        flush()

    @staticmethod
    def _tool(s, p, ts):
        name = str(p.get("toolId") or "tool")
        args = {}
        message = p.get("invocationMessage")
        message = message.get("value") if isinstance(message, dict) else message
        if isinstance(message, str):
            args["message"] = message
        data = p.get("toolSpecificData") if isinstance(p.get("toolSpecificData"), dict) else {}
        line = data.get("commandLine")
        command = (line.get("toolEdited") or line.get("userEdited") or line.get("original")) \
            if isinstance(line, dict) else data.get("command")
        if isinstance(command, str):
            args["command"] = command
        details = p.get("resultDetails") if isinstance(p.get("resultDetails"), dict) else {}
        if isinstance(details.get("input"), str):
            args["input"] = details["input"]
        output = "\n".join(o.get("value") for o in _list(details.get("output"))
                           if isinstance(o, dict) and o.get("isText", True) and isinstance(o.get("value"), str))
        output = output or ((data.get("terminalCommandOutput") or {}).get("text")
                            if isinstance(data.get("terminalCommandOutput"), dict) else None)
        s.add("tool", tool_text(name, args, output, bool(details.get("isError"))), role="assistant", tool=name,
              path=tool_path(_json_arg(args.get("input")) if args.get("input") else None), ts=ts)



# -------------------------------------------------------------------------------------------------
# Zed (zed-industries/zed): <data dir>/threads/threads.db, one zstd-compressed JSON thread per row
# -------------------------------------------------------------------------------------------------


@register
class ZedParser(Parser):
    """Zed's agent panel threads: the SQLite store `threads/threads.db` under Zed's data folder
    (Linux `$XDG_DATA_HOME/zed`, also the Flatpak's; macOS `~/Library/Application Support/Zed`;
    Windows `%LOCALAPPDATA%\\Zed`), table `threads(id, summary, updated_at, data_type, data, parent_id,
    folder_paths, created_at)` (crates/agent/src/db.rs). `data` is the thread as JSON, zstd-compressed
    when `data_type` is "zstd" (see zstd_decompress: a thread that cannot be decompressed here is
    counted as skipped). Two JSON shapes: the current DbThread (version 0.3.0) with `messages` of
    `{"User": {content: [{"Text": ...} | {"Mention": {uri, content}}]}}`, `{"Agent": {content:
    [{"Text"} | {"Thinking": {text}} | {"ToolUse": {id, name, input}}], tool_results: {id: {is_error,
    content, output}}}}` and `"Resume"`; and the legacy SerializedThread (0.1/0.2) with `messages` of
    `{role, segments: [{type: text|thinking, text}], tool_uses, tool_results, context}`. A mention's
    content (a file it inserted) is context. The project is `folder_paths` (one per line), else the
    first worktree of the project snapshot; a sub-agent thread names its parent in `parent_id`.
    """

    id, label, version = "zed", "Zed", 2
    # a message is {"User": ...}, {"Agent": ...} or "Resume" (legacy threads: a role); the content
    # blocks inside are one-key objects too ({"Text": ...}); counted where they are read
    records = ("User", "Agent", "Resume", "user", "assistant", "system")
    blocks, skipped_blocks = ("Text", "Mention", "Thinking", "ToolUse", "text", "thinking"), ("Image", "RedactedThinking")
    verified = "db.rs, thread.rs (source), 2026-11-25"

    def default_roots(self, env):
        home = _home(env)
        xdg = env_path(env, "XDG_DATA_HOME") or os.path.join(home, ".local", "share")
        candidates = [os.path.join(xdg, "zed", "threads"),
                      os.path.join(home, ".var", "app", "dev.zed.Zed", "data", "zed", "threads"),
                      os.path.join(home, "Library", "Application Support", "Zed", "threads")]
        if env.get("LOCALAPPDATA"):
            candidates.append(os.path.join(env["LOCALAPPDATA"], "Zed", "threads"))
        found = [c for c in candidates if root_isdir(env, c)]
        return found or candidates[:1]

    def list_files(self, root):
        return walk_files(root, lambda n: n == "threads.db", max_depth=0)

    def parse(self, path, report):
        with AgentStore(path) as con:
            cols = set(_db_columns(con, "threads"))
            if not {"id", "summary", "updated_at", "data_type", "data"} <= cols:
                raise NotASessionFile("unknown schema (no Zed threads table)")
            rows = con.execute("SELECT id, summary, updated_at, data_type, data, %s FROM threads ORDER BY rowid"
                               % _pick(cols, ("parent_id", "folder_paths", "created_at"))).fetchall()
        sessions = []
        for tid, summary, updated, data_type, data, parent, folders, created in rows:
            try:
                raw = zstd_decompress(bytes(data)) if data_type == "zstd" else data
            except NotASessionFile as e:
                report.skip(str(e))
                continue
            thread = _json_value(raw)
            if not isinstance(thread, dict):
                report.skip("thread that is not JSON")
                continue
            s = Session(self.id, str(tid), path)
            s.name = _str(summary) or _str(thread.get("title")) or _str(thread.get("summary"))
            s.parent = _str(parent)
            s.cwd = self._cwd(folders, thread)
            s.touch(norm_time(created))
            s.touch(norm_time(updated) or norm_time(thread.get("updated_at")))
            tools = ToolCalls(s)
            for m in _list(thread.get("messages")):
                if isinstance(m, dict) and "role" in m:
                    self._legacy_message(s, tools, m, report)
                elif isinstance(m, dict) and ("User" in m or "Agent" in m):
                    self._message(s, tools, m, report)
                elif m != "Resume":
                    report.unrecognized("message %s" % (sorted(m)[0] if isinstance(m, dict) and m else type(m).__name__))
            summary_text = _str(thread.get("detailed_summary"))
            if summary_text:
                s.add("summary", summary_text, role="system")
            _finish_times(s, path)
            sessions.append(s)
        return sessions

    @staticmethod
    def _cwd(folders, thread):
        if isinstance(folders, str) and folders.strip():
            return folders.strip().split("\n")[0]
        snapshot = thread.get("initial_project_snapshot")
        trees = snapshot.get("worktree_snapshots") if isinstance(snapshot, dict) else None
        for tree in trees if isinstance(trees, list) else []:
            if isinstance(tree, dict) and _str(tree.get("worktree_path")):
                return tree["worktree_path"]
        return None

    @staticmethod
    def _result_text(result):
        content = result.get("content")
        if isinstance(content, dict):
            content = content.get("Text")
        elif isinstance(content, list):
            content = "\n".join(c if isinstance(c, str) else c.get("Text") or c.get("text") or ""
                                for c in content if isinstance(c, (str, dict)))
        return content if isinstance(content, str) else _out_text(result.get("output"))

    def _message(self, s, tools, m, report):
        if "User" in m:
            body = m["User"] if isinstance(m["User"], dict) else {}
            for c in _list(body.get("content")):
                if isinstance(c, dict) and isinstance(c.get("Text"), str):
                    s.add("user", c["Text"], role="user")
                elif isinstance(c, dict) and isinstance(c.get("Mention"), dict):
                    s.add("context", str(c["Mention"].get("content") or ""), role="user")
                elif not (isinstance(c, dict) and "Image" in c):
                    report.unrecognized("user content")
            return
        body = m["Agent"] if isinstance(m["Agent"], dict) else {}
        for c in _list(body.get("content")):
            if isinstance(c, dict) and isinstance(c.get("Text"), str):
                s.add("assistant", c["Text"], role="assistant")
            elif isinstance(c, dict) and isinstance(c.get("Thinking"), dict):
                s.add("thinking", str(c["Thinking"].get("text") or ""), role="assistant")
            elif isinstance(c, dict) and isinstance(c.get("ToolUse"), dict):
                use = c["ToolUse"]
                tools.call(use.get("id"), use.get("name"), use.get("input") or _json_arg(use.get("raw_input")))
            elif not (isinstance(c, dict) and "RedactedThinking" in c):
                report.unrecognized("agent content")
        results = body.get("tool_results")
        for call_id, result in (results.items() if isinstance(results, dict) else []):
            if isinstance(result, dict):
                tools.result(result.get("tool_use_id") or call_id, self._result_text(result),
                             bool(result.get("is_error")), name=result.get("tool_name"))

    def _legacy_message(self, s, tools, m, report):
        role = m.get("role")
        kind = {"user": "user", "assistant": "assistant", "system": "context"}.get(role)
        if kind is None:
            report.unrecognized("role %s" % role)
            return
        if isinstance(m.get("context"), str):
            s.add("context", m["context"], role=role)
        for seg in _list(m.get("segments")):
            if isinstance(seg, dict) and seg.get("type") == "text":
                s.add(kind, str(seg.get("text") or ""), role=role)
            elif isinstance(seg, dict) and seg.get("type") == "thinking":
                s.add("thinking", str(seg.get("text") or ""), role=role)
        for use in _list(m.get("tool_uses")):
            if isinstance(use, dict):
                tools.call(use.get("id"), use.get("name"), use.get("input"))
        for result in _list(m.get("tool_results")):
            if isinstance(result, dict):
                tools.result(result.get("tool_use_id"), self._result_text(result), bool(result.get("is_error")))



# -------------------------------------------------------------------------------------------------
# Mistral Vibe (mistralai/mistral-vibe): ~/.vibe/logs/session/session_<stamp>_<id>/messages.jsonl + meta.json
# -------------------------------------------------------------------------------------------------


@register
class VibeParser(Parser):
    """Mistral Vibe sessions: one folder per session with `messages.jsonl`, the conversation as the
    model saw it, one OpenAI-style message per line (`{role: system|user|assistant|tool, content,
    reasoning_content?, tool_calls?: [{id, function{name, arguments}}], tool_call_id?, injected?}`),
    and `meta.json` (`session_id, parent_session_id, start_time, end_time, working_dir` (or
    `environment.working_directory`), `title`). Injected user messages and the system prompt are
    context; a tool message is joined to its call. (Layout and fields as agentsview's vibe parser
    reads them; not checked against Vibe's own source.)
    """

    id, label, version = "vibe", "Mistral Vibe", 2
    records = ("system", "user", "assistant", "tool")   # message roles
    verified = "as agentsview vibe.go reads it, 2026-11-25"

    def default_roots(self, env):
        return [os.path.join(agent_dir(env, "VIBE_HOME", ".vibe"), "logs", "session")]

    def list_files(self, root):
        return walk_files(root, lambda n: n == "messages.jsonl", max_depth=1)

    def sidecars(self, path):
        return [os.path.join(os.path.dirname(path), "meta.json")]

    def parse(self, path, report):
        first = first_json_line(path)
        if first is not None and "role" not in first:
            raise NotASessionFile("no Vibe message on the first line")
        folder = os.path.dirname(path)
        meta = _read_json(os.path.join(folder, "meta.json")) or {}
        sid = _str(meta.get("session_id")) or os.path.basename(folder)
        s = Session(self.id, sid, path)
        s.name = _str(meta.get("title"))
        env = meta.get("environment") if isinstance(meta.get("environment"), dict) else {}
        s.cwd = _str(meta.get("working_dir")) or _str(env.get("working_directory"))
        s.parent = _str(meta.get("parent_session_id"))
        s.touch(norm_time(meta.get("start_time")))
        s.touch(norm_time(meta.get("end_time")))
        tools = ToolCalls(s)
        seen = False
        for _, m in iter_jsonl(path, report):
            seen = True
            role = self.record_type(report, m, key="role", family="role ")
            content = text_of(m.get("content"))
            if role == "user":
                s.add("context" if m.get("injected") else "user", content, role="user")
            elif role == "assistant":
                s.add("thinking", m.get("reasoning_content") if isinstance(m.get("reasoning_content"), str) else "",
                      role="assistant")
                s.add("assistant", content, role="assistant")
                for call in _list(m.get("tool_calls")):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict):
                        tools.call(call.get("id"), fn.get("name"), _json_arg(fn.get("arguments")))
            elif role == "tool":
                tools.result(m.get("tool_call_id"), content, name=m.get("name"))
            elif role == "system":
                s.add("context", content, role="system")
        if not seen and not meta:
            raise NotASessionFile("no Vibe messages")
        _finish_times(s, path)
        return [s]


# -------------------------------------------------------------------------------------------------
# OpenHands CLI (All-Hands-AI/OpenHands): ~/.openhands/conversations/<id>/base_state.json + events/*.json
# -------------------------------------------------------------------------------------------------


@register
class OpenHandsParser(Parser):
    """OpenHands conversations (the CLI and the V1 agent SDK): one folder per conversation with
    `base_state.json` (id, agent.llm.model, workspace) and `events/event-NNNNN-<uuid>.json`, one
    event per file, written once, in order of their names. Events: `MessageEvent` (`source` user or
    agent, `llm_message{role, content[{type: text, text}]}`, thinking blocks / reasoning_content),
    `ActionEvent` (the agent's tool call: `tool_name`, `tool_call_id`, `tool_call{name, arguments}`,
    `thought`, `action{command, path...}`), `ObservationEvent` (its result: `observation{content,
    command, metadata{exit_code, working_dir}}`); the system prompt and state updates are skipped,
    an agent error is the assistant's. The session file is `base_state.json`; the events folder is a
    sidecar (a new event file changes the folder's time). (Shapes as agentsview's openhands parser
    reads them.)
    """

    id, label, version = "openhands", "OpenHands", 2
    verified = "as agentsview openhands.go reads it, 2026-11-25"

    records = ("MessageEvent", "ActionEvent", "ObservationEvent", "AgentErrorEvent")
    skipped_records = frozenset({"SystemPromptEvent", "ConversationStateUpdateEvent", "PauseEvent", "TokenEvent",
                                "CondensationRequest", "Condensation", "UserRejectObservation"})

    def default_roots(self, env):
        return [agent_dir(env, "OPENHANDS_CONVERSATIONS_DIR", ".openhands", "conversations")]

    def list_files(self, root):
        return walk_files(root, lambda n: n == "base_state.json", max_depth=1)

    def sidecars(self, path):
        folder = os.path.dirname(path)
        return [os.path.join(folder, "events"), os.path.join(folder, "TASKS.json")]

    def parse(self, path, report):
        base = _read_json(path)
        events_dir = os.path.join(os.path.dirname(path), "events")
        if base is None or not os.path.isdir(events_dir):
            raise NotASessionFile("no OpenHands conversation (base_state.json and events/)")
        s = Session(self.id, _str(base.get("id")) or os.path.basename(os.path.dirname(path)), path)
        workspace = base.get("workspace") if isinstance(base.get("workspace"), dict) else {}
        s.cwd = next((workspace[k] for k in ("working_dir", "cwd", "path", "root", "mount_path")
                      if _str(workspace.get(k))), None)
        s.name = _str(base.get("title"))
        tools = ToolCalls(s)
        names = sorted(n for n in os.listdir(events_dir) if n.endswith(".json"))
        for name in names:
            ev = _read_json(os.path.join(events_dir, name))
            if ev is None:
                report.skip("unreadable event")
                continue
            ts = norm_time(ev.get("timestamp"))
            s.touch(ts)
            kind = self.record_type(report, ev, key="kind", family="event ")
            thinking = "\n".join(b["thinking"] for b in _list(ev.get("thinking_blocks"))
                                 if isinstance(b, dict) and isinstance(b.get("thinking"), str))
            thinking = thinking or (ev.get("reasoning_content") if isinstance(ev.get("reasoning_content"), str) else "")
            if kind == "MessageEvent":
                m = ev.get("llm_message") if isinstance(ev.get("llm_message"), dict) else {}
                role = m.get("role") or ev.get("source")
                s.add("thinking", thinking, role="assistant", ts=ts)
                s.add("user" if role == "user" else "assistant" if role in ("assistant", "agent") else "context",
                      text_of(m.get("content")), role=str(role), ts=ts)
            elif kind == "ActionEvent":
                s.add("thinking", thinking, role="assistant", ts=ts)
                s.add("assistant", text_of(ev.get("thought")), role="assistant", ts=ts)
                call = ev.get("tool_call") if isinstance(ev.get("tool_call"), dict) else {}
                args = _json_arg(call.get("arguments")) or ev.get("action")
                tools.call(ev.get("tool_call_id"), ev.get("tool_name") or call.get("name"), args, ts=ts)
            elif kind == "ObservationEvent":
                obs = ev.get("observation") if isinstance(ev.get("observation"), dict) else {}
                meta = obs.get("metadata") if isinstance(obs.get("metadata"), dict) else {}
                s.cwd = s.cwd or _str(meta.get("working_dir"))
                content = obs.get("content")
                output = text_of(content) if isinstance(content, (str, list)) else _out_text(content)
                failed = bool(obs.get("is_error")) or meta.get("exit_code") not in (None, 0)
                tools.result(ev.get("tool_call_id"), output, failed, name=ev.get("tool_name"), ts=ts)
            elif kind == "AgentErrorEvent":
                s.add("assistant", str(ev.get("error") or ""), role="assistant", ts=ts)
        _finish_times(s, path)
        return [s]


# -------------------------------------------------------------------------------------------------
# Kiro CLI (kirodotdev): ~/.kiro/sessions/cli/<id>.jsonl + <id>.json
# -------------------------------------------------------------------------------------------------


@register
class KiroParser(Parser):
    """Kiro CLI sessions (closed source): `<id>.jsonl` with one turn per line, `{kind: Prompt |
    AssistantMessage | ToolResults, data: {content: [{kind: text, data} | {kind: toolUse, data:
    {toolUseId, name, input}} | {kind: toolResult, data: {toolUseId, content}}]}}`, beside
    `<id>.json` (`session_id, cwd, title, created_at, updated_at`); and the older SQLite store
    `kiro-cli/data.sqlite3` in the data folder (see _store). (Layouts and fields as agentsview's kiro
    parser reads them.) The Kiro IDE is the kiro-ide parser's.
    """

    id, label, version = "kiro", "Kiro CLI", 2
    records = ("Prompt", "AssistantMessage", "ToolResults")   # a turn's `kind`
    verified = "as agentsview kiro.go reads it, 2026-11-25"

    def default_roots(self, env):
        home = _home(env)
        data = env_path(env, "XDG_DATA_HOME") or os.path.join(home, ".local", "share")
        stores = [os.path.join(data, "kiro-cli"), os.path.join(home, "Library", "Application Support", "kiro-cli")]
        return [os.path.join(home, ".kiro", "sessions", "cli")] + [d for d in stores if root_isdir(env, d)]

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".jsonl") or n == "data.sqlite3", max_depth=0)

    def sidecars(self, path):
        return [path[:-len(".jsonl")] + ".json"] if path.endswith(".jsonl") else []

    @staticmethod
    def _blocks(data, kind):
        content = data.get("content") if isinstance(data, dict) else None
        return [b.get("data") for b in content if isinstance(b, dict) and b.get("kind") == kind] \
            if isinstance(content, list) else []

    def parse(self, path, report):
        if path.endswith(".sqlite3"):
            return self._store(path, report)
        meta = _read_json(path[:-len(".jsonl")] + ".json") or {}
        s = Session(self.id, _str(meta.get("session_id")) or os.path.basename(path)[:-len(".jsonl")], path)
        s.name = _str(meta.get("title"))
        s.cwd = _str(meta.get("cwd"))
        s.touch(norm_time(meta.get("created_at")))
        s.touch(norm_time(meta.get("updated_at")))
        tools = ToolCalls(s)
        turns = 0
        for _, rec in iter_jsonl(path, report):
            kind, data = self.record_type(report, rec, key="kind"), rec.get("data")
            if kind == "Prompt":
                s.add("user", "\n".join(t for t in self._blocks(data, "text") if isinstance(t, str)), role="user")
            elif kind == "AssistantMessage":
                s.add("assistant", "\n".join(t for t in self._blocks(data, "text") if isinstance(t, str)),
                      role="assistant")
                for use in self._blocks(data, "toolUse"):
                    if isinstance(use, dict):
                        tools.call(use.get("toolUseId"), use.get("name"), use.get("input"))
            elif kind == "ToolResults":
                for result in self._blocks(data, "toolResult"):
                    if isinstance(result, dict):
                        content = result.get("content")
                        output = "\n".join(str(c.get("data") if isinstance(c, dict) and "data" in c else
                                               _out_text(c)) for c in content) if isinstance(content, list) \
                            else _out_text(content)
                        tools.result(result.get("toolUseId"), output, result.get("status") == "error")
            else:
                continue
            turns += 1
        if not turns and not meta:
            raise NotASessionFile("no Kiro turns")
        _finish_times(s, path)
        return [s]

    def _store(self, path, report):
        """The older store: `conversations_v2(key = cwd, conversation_id, value, created_at,
        updated_at)`, `value` = `{history: [{user: {content: {Prompt: {prompt}} | {ToolUseResults:
        {tool_use_results: [{tool_use_id, content: [{Text} | {Json}], status}]}}, timestamp},
        assistant: {Response: {content}} | {ToolUse: {content, tool_uses: [{id, name, args}]}}}]}`."""
        with AgentStore(path) as con:
            if not {"conversation_id", "value"} <= set(_db_columns(con, "conversations_v2")):
                raise NotASessionFile("unknown schema (no Kiro conversations_v2 table)")
            rows = con.execute("SELECT key, conversation_id, value, created_at, updated_at FROM conversations_v2 "
                               "ORDER BY updated_at").fetchall()
        sessions = {}
        for key, conv, value, created, updated in rows:
            data = _json_value(value)
            if not isinstance(data, dict) or not conv:
                report.skip("conversation that is not JSON")
                continue
            s = sessions[conv] = Session(self.id, str(conv), path)   # the newest row of an id wins
            s.cwd = _str(key)
            s.touch(norm_time(created))
            s.touch(norm_time(updated))
            tools = ToolCalls(s)
            for turn in _list(data.get("history")):
                user = turn.get("user") if isinstance(turn, dict) and isinstance(turn.get("user"), dict) else {}
                content = user.get("content") if isinstance(user.get("content"), dict) else {}
                ts = norm_time(user.get("timestamp"))
                s.touch(ts)
                prompt = content.get("Prompt") if isinstance(content.get("Prompt"), dict) else {}
                s.add("user", prompt.get("prompt") if isinstance(prompt.get("prompt"), str) else "", role="user", ts=ts)
                results = content.get("ToolUseResults") if isinstance(content.get("ToolUseResults"), dict) else {}
                for r in _list(results.get("tool_use_results")):
                    if isinstance(r, dict):
                        out = "\n".join(c["Text"] if isinstance(c, dict) and isinstance(c.get("Text"), str)
                                         else _out_text(c.get("Json") if isinstance(c, dict) else c)
                                         for c in _list(r.get("content")))
                        tools.result(r.get("tool_use_id"), out, r.get("status") == "Error", ts=ts)
                answer = turn.get("assistant") if isinstance(turn, dict) and isinstance(turn.get("assistant"), dict) else {}
                for kind in ("Response", "ToolUse"):
                    part = answer.get(kind) if isinstance(answer.get(kind), dict) else {}
                    s.add("assistant", part.get("content") if isinstance(part.get("content"), str) else "",
                          role="assistant", ts=ts)
                    for use in _list(part.get("tool_uses")):
                        if isinstance(use, dict):
                            tools.call(use.get("id"), use.get("name"), use.get("args"), ts=ts)
        for s in sessions.values():
            _finish_times(s, path)
        return list(sessions.values())


# -------------------------------------------------------------------------------------------------
# Devin CLI (Cognition): <data>/devin/cli/sessions.db
# -------------------------------------------------------------------------------------------------


@register
class DevinParser(Parser):
    """Devin's CLI: the SQLite store `devin/cli/sessions.db` in the data folder (`~/.local/share`,
    `~/Library/Application Support`): `sessions(id, title, working_directory, created_at,
    last_activity_at, hidden)` and `message_nodes(session_id, node_id, parent_node_id, chat_message,
    created_at)` (times in epoch seconds), `chat_message` an OpenAI-style message (`role, content,
    thinking?, tool_calls?: [{id, function{name, arguments}}], tool_call_id?`). Every node of the
    tree is indexed in time order (an abandoned branch is still something the user did); the system
    prompt is context. (Tables as agentsview's devin parser reads them.)
    """

    id, label, version = "devin", "Devin CLI", 2
    records = ("user", "assistant", "agent", "tool", "system")   # message roles
    verified = "as agentsview devin.go reads it, 2026-11-25"

    def default_roots(self, env):
        home = _home(env)
        bases = [env_path(env, "XDG_DATA_HOME") or os.path.join(home, ".local", "share"),
                 os.path.join(home, "Library", "Application Support")]
        roots = [os.path.join(b, "devin", "cli") for b in bases]
        found = [r for r in roots if root_isdir(env, r)]
        return found or roots[:1]

    def list_files(self, root):
        return walk_files(root, lambda n: n == "sessions.db", max_depth=0)

    def parse(self, path, report):
        with AgentStore(path) as con:
            scols, mcols = set(_db_columns(con, "sessions")), set(_db_columns(con, "message_nodes"))
            if "id" not in scols or not {"session_id", "chat_message"} <= mcols:
                raise NotASessionFile("unknown schema (no Devin sessions/message_nodes tables)")
            pick = lambda c: c if c in scols else "NULL"   # noqa: E731
            heads = con.execute("SELECT id, %s, %s, %s, %s, %s FROM sessions" % tuple(
                pick(c) for c in ("title", "working_directory", "created_at", "last_activity_at", "hidden"))).fetchall()
            nodes = con.execute("SELECT session_id, chat_message, %s FROM message_nodes ORDER BY %s, rowid" % (
                ("created_at",) * 2 if "created_at" in mcols else ("NULL", "rowid"))).fetchall()
        sessions = {}
        for sid, title, cwd, created, last, hidden in heads:
            if hidden == 1:
                continue
            s = sessions[str(sid)] = (Session(self.id, str(sid), path), None)
            s[0].name, s[0].cwd = _str(title), _str(cwd)
            s[0].touch(norm_time(created))
            s[0].touch(norm_time(last))
        sessions = {k: (s, ToolCalls(s)) for k, (s, _) in sessions.items()}
        for sid, raw, created in nodes:
            entry = sessions.get(str(sid))
            m = _json_value(raw)
            if entry is None or not isinstance(m, dict):
                report.skip("message of an unknown session" if entry is None else "message that is not JSON")
                continue
            s, tools = entry
            ts = norm_time(created)
            s.touch(ts)
            role = self.record_type(report, m, key="role", family="role ")
            if role == "user":
                s.add("user", text_of(m.get("content")), role="user", ts=ts)
            elif role in ("assistant", "agent"):
                s.add("thinking", m["thinking"] if isinstance(m.get("thinking"), str) else "", role="assistant", ts=ts)
                s.add("assistant", text_of(m.get("content")), role="assistant", ts=ts)
                for call in _list(m.get("tool_calls")):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict):
                        tools.call(call.get("id"), fn.get("name"), _json_arg(fn.get("arguments")), ts=ts)
            elif role == "tool":
                tools.result(m.get("tool_call_id"), _out_text(m.get("content")), ts=ts)
            elif role == "system":
                s.add("context", text_of(m.get("content")), role="system", ts=ts)
        for s, _ in sessions.values():
            _finish_times(s, path)
        return [s for s, _ in sessions.values()]

# -------------------------------------------------------------------------------------------------
# Windsurf (Codeium): ~/.codeium/windsurf/cascade/<id>.pb, encrypted
# -------------------------------------------------------------------------------------------------


@register
class WindsurfParser(Parser):
    """Windsurf's Cascade conversations: `~/.codeium/windsurf/cascade/<id>.pb` (and
    `windsurf-next`), protobuf encrypted with a key Windsurf does not keep on disk in a form meant to
    be read: Sesame cannot read them, and says so file by file (`status` lists them as not indexed with
    that reason) rather than miss them in silence. What Windsurf's editor keeps as VS Code chat
    sessions (`workspaceStorage/*/chatSessions`) is read by the copilot-chat parser.
    """

    id, label, version = "windsurf", "Windsurf Cascade", 2
    verified = "layout only, 2026-11-25"
    records = ()

    def default_roots(self, env):
        home = os.path.join(_home(env), ".codeium")
        return [os.path.join(home, "windsurf", "cascade"), os.path.join(home, "windsurf-next", "cascade")]

    def list_files(self, root):
        return walk_files(root, lambda n: n.endswith(".pb"), max_depth=0)

    def parse(self, path, report):
        raise NotASessionFile("Windsurf Cascade conversations are encrypted: Sesame cannot read them")

# -------------------------------------------------------------------------------------------------
# DeepSeek Harness: ${DSH_HOME:-~/.dsh}/sessions/<slug>/session-<id>/session.jsonl[.zstd]
# -------------------------------------------------------------------------------------------------


@register
class DeepSeekHarnessParser(Parser):
    """DeepSeek Harness session logs: `session.jsonl.zstd` (zstd frames of JSONL, the default; read
    through zstd_lines) or `session.jsonl`, one folder per session. The first line is the header
    (`{type: session, version, id, createdAt (ms), cwd, parentSession?, origin?}`), then events
    `{type, seq, time (ms), data, surfaceOp?}`: the conversation is the "surface" events `user/message`,
    `assistant/message` and `tool/result`, each `data.message = {id, role, content: [blocks], source:
    {kind}}` with blocks `text`, `reasoning`, `tool-call {id, name, arguments}`, `tool-result
    {toolCallId, content}`; a user message whose source is not the user is context; `session/title`
    names the session; `compaction/summary` is a summary. A surface event that replaces earlier ones
    (compaction) is indexed as well: nothing the session said is lost. The rest (turns, steps, streamed
    chunks, requests, approvals) is bookkeeping. (Format as agentsview's deepseek_harness reader has it.)
    """

    id, label, version = "deepseek-harness", "DeepSeek Harness", 2
    verified = "as agentsview deepseek_harness.go reads it, 2026-11-25"
    records = ("session", "user/message", "assistant/message", "tool/result", "session/title", "compaction/summary")
    skipped_records = ("turn/*", "step/*", "assistant/chunk", "request/*", "approval/*", "command/*", "hook/*",
                       "llm/*", "tool/call", "tool/code-dispatch*", "tool-workflow/*", "compaction/start",
                       "compaction/end", "compaction/prune", "agent-preset/selected", "agent/inbox/spliced",
                       "feedback/record", "goal/change", "permission/preset", "plan/mode", "sandbox/mode",
                       "schedule/change", "session/end-seed", "session/title-llm-request", "subagent/descriptor",
                       "todo/write", "web/*", "text-chunks", "reasoning-chunks", "tool-call-chunks")
    blocks, skipped_blocks = ("text", "reasoning", "tool-call", "tool-result"), ("image",)

    def default_roots(self, env):
        return [os.path.join(agent_dir(env, "DSH_HOME", ".dsh"), "sessions")]

    def list_files(self, root):
        found = walk_files(root, lambda n: n in ("session.jsonl", "session.jsonl.zstd"), max_depth=2)
        both = set(found)
        return [p for p in found if not (p.endswith(".jsonl") and p + ".zstd" in both)]   # zstd is the live one

    def parse(self, path, report):
        s, tools = None, None
        for _, rec in iter_jsonl_any(path, report):
            rtype = self.record_type(report, rec)
            if s is None:
                if rtype != "session" or not _str(rec.get("id")):
                    raise NotASessionFile("no DeepSeek Harness session header")
                s, tools = Session(self.id, rec["id"], path), None
                s.cwd, s.parent = _str(rec.get("cwd")), _str(rec.get("parentSession"))
                s.touch(norm_time(rec.get("createdAt")))
                tools = ToolCalls(s)
                continue
            data = rec.get("data") if isinstance(rec.get("data"), dict) else {}
            ts = norm_time(rec.get("time"))
            s.touch(ts)
            if rtype == "session/title":
                s.name = _str(data.get("title")) or s.name
            elif rtype == "compaction/summary":
                s.add("summary", data.get("summary") if isinstance(data.get("summary"), str) else "", role="system", ts=ts)
            elif rtype in ("user/message", "assistant/message", "tool/result"):
                m = data.get("message") if isinstance(data.get("message"), dict) else {}
                source = m.get("source") if isinstance(m.get("source"), dict) else {}
                self._content(s, tools, m.get("content"), rtype, source.get("kind"), ts, report)
        if s is None:
            raise NotASessionFile("empty DeepSeek Harness log")
        _finish_times(s, path)
        return [s]

    def _content(self, s, tools, content, rtype, source, ts, report):
        text, thinking, calls = [], [], []
        for b in content if isinstance(content, list) else []:
            btype = self.block_type(report, b)
            if btype == "text" and isinstance(b.get("text"), str):
                text.append(b["text"])
            elif btype == "reasoning" and isinstance(b.get("text"), str):
                thinking.append(b["text"])
            elif btype == "tool-call":
                calls.append(b)
            elif btype == "tool-result":
                tools.result(b.get("toolCallId"), _out_text(b.get("content")), bool(b.get("isError")), ts=ts)
        if rtype == "user/message":
            s.add("user" if source in (None, "user") else "context", "\n".join(text), role="user", ts=ts)
        elif rtype == "assistant/message":
            s.add("thinking", "\n".join(thinking), role="assistant", ts=ts)
            s.add("assistant", "\n".join(text), role="assistant", ts=ts)
        for b in calls:   # after the text that announced them, as the agent showed them
            tools.call(b.get("id"), b.get("name"), _json_arg(b.get("arguments")), ts=ts)

# -------------------------------------------------------------------------------------------------
# Trae IDE (ByteDance, a VS Code fork): Trae[ CN]/User/{workspace,global}Storage/state.vscdb
# -------------------------------------------------------------------------------------------------


@register
class TraeParser(Parser):
    """The Trae IDE's agent chats, kept by its builds up to 2025 in the editor's `state.vscdb`
    (ItemTable key `memento/icube-ai-agent-storage`: `{list: [{sessionId, createdAt, updatedAt,
    messages: [{role, content, agentTaskContent?, timestamp}]}]}`), one database per workspace
    (`workspaceStorage/<hash>/`, the project in its `workspace.json`) and one global. Newer builds keep
    the chats in `ModularData/ai-agent/database.db`, encrypted: not readable. The CLI (TraeX) writes
    Codex's format and is the traex parser's. (Layout as agentsview's trae reader has it.)
    """

    id, label, version = "trae", "Trae IDE", 2
    verified = "as agentsview trae_provider.go reads it, 2026-11-25"
    records = ("user", "assistant", "system", "tool")   # message roles
    STORAGE_KEY = "memento/icube-ai-agent-storage"

    def default_roots(self, env):
        home = _home(env)
        bases = [env_path(env, "XDG_CONFIG_HOME") or os.path.join(home, ".config"),
                 os.path.join(home, "Library", "Application Support")]
        if env.get("APPDATA"):
            bases.append(env["APPDATA"])
        roots = [os.path.join(b, product, "User") for b in bases for product in ("Trae", "Trae CN")]
        found = [r for r in roots if root_isdir(env, r)]
        return found or roots[:1]

    def list_files(self, root):
        return [p for p in walk_files(root, lambda n: n == "state.vscdb", max_depth=2)
                if os.path.basename(os.path.dirname(os.path.dirname(p))) == "workspaceStorage"
                or os.path.basename(os.path.dirname(p)) == "globalStorage"]

    def parse(self, path, report):
        with AgentStore(path) as con:
            row = con.execute("SELECT value FROM ItemTable WHERE key = ?", (self.STORAGE_KEY,)).fetchone()
        store = _json_value(row[0]) if row else None
        if not isinstance(store, dict) or not isinstance(store.get("list"), list):
            return []   # an editor database without agent chats
        ws = _read_json(os.path.join(os.path.dirname(path), "workspace.json")) or {}
        cwd = file_uri_path(ws.get("folder")) if isinstance(ws.get("folder"), str) else None
        sessions = []
        for item in store["list"]:
            if not isinstance(item, dict) or not _str(item.get("sessionId")):
                report.skip("malformed session")
                continue
            s = Session(self.id, item["sessionId"], path)
            s.cwd = cwd
            s.touch(norm_time(item.get("createdAt")))
            s.touch(norm_time(item.get("updatedAt")))
            for m in _list(item.get("messages")):
                if not isinstance(m, dict):
                    continue
                role = self.record_type(report, m, key="role", family="role ")
                ts = norm_time(m.get("timestamp"))
                s.touch(ts)
                text = m.get("content") if isinstance(m.get("content"), str) else ""
                if role == "user":
                    s.add("user", text, role="user", ts=ts)
                elif role == "assistant":
                    s.add("assistant", text or _out_text(_json_arg(m.get("agentTaskContent"))), role="assistant", ts=ts)
                elif role in ("system", "tool"):
                    s.add("context", text, role=role, ts=ts)
            _finish_times(s, path)
            sessions.append(s)
        return sessions

# -------------------------------------------------------------------------------------------------
# Warp (warpdotdev): warp.sqlite, the prompts of its agent mode (ai_queries)
# -------------------------------------------------------------------------------------------------


@register
class WarpParser(Parser):
    """Warp's Agent Mode: `warp.sqlite` (Linux `~/.local/state/warp-terminal`, macOS the
    `dev.warp.Warp-Stable` group container, Windows `AppData/Local/warp/Warp/data`). The local store
    keeps what the user asked, not the answers: `ai_queries(exchange_id, conversation_id, start_ts,
    input, working_directory, ...)` with `input` a JSON list whose first item is `{"Query": {"text"}}`;
    `agent_conversations(conversation_id, conversation_data, last_modified_at)` lists the
    conversations. One session per conversation, its prompts as user messages; times are UTC without a
    zone. (Tables as agentsview's warp parser reads them.)
    """

    id, label, version = "warp", "Warp", 2
    records = ()   # table rows: no record types to drift
    verified = "as agentsview warp.go reads it, 2026-11-25"

    def default_roots(self, env):
        home = _home(env)
        candidates = [os.path.join(env_path(env, "XDG_STATE_HOME") or os.path.join(home, ".local", "state"),
                                   "warp-terminal"),
                      os.path.join(home, "Library", "Group Containers", "2BBY89MBSN.dev.warp", "Library",
                                   "Application Support", "dev.warp.Warp-Stable"),
                      os.path.join(home, "AppData", "Local", "warp", "Warp", "data")]
        found = [c for c in candidates if root_isdir(env, c)]
        return found or candidates[:1]

    def list_files(self, root):
        return walk_files(root, lambda n: n == "warp.sqlite", max_depth=0)

    def parse(self, path, report):
        with AgentStore(path) as con:
            cols = set(_db_columns(con, "ai_queries"))
            if not {"conversation_id", "start_ts", "input"} <= cols:
                raise NotASessionFile("unknown schema (no Warp ai_queries table)")
            cwd_col = "working_directory" if "working_directory" in cols else "NULL"
            rows = con.execute("SELECT conversation_id, start_ts, input, %s FROM ai_queries "
                               "ORDER BY start_ts" % cwd_col).fetchall()
        sessions = {}
        for conv, start, raw, cwd in rows:
            if not conv:
                report.skip("query without a conversation")
                continue
            s = sessions.get(conv)
            if s is None:
                s = sessions[conv] = Session(self.id, str(conv), path)
            s.cwd = s.cwd or _str(cwd)
            ts = utc_text(start)
            s.touch(ts)
            items = _json_arg(raw, (list,))
            query = items[0].get("Query") if isinstance(items, list) and items and isinstance(items[0], dict) else None
            if isinstance(query, dict) and isinstance(query.get("text"), str):
                s.add("user", query["text"], role="user", ts=ts)
        for s in sessions.values():
            _finish_times(s, path)
        return list(sessions.values())



# ==================================================================================================
# Text analysis: the index's tokenizer and stemmer, in Python
# ==================================================================================================
#
# FTS5 tokenizes with `porter unicode61 remove_diacritics 2`. The query builder, the snippet
# matcher and the highlighter must see the same words as the index, or a session found by a word
# shows no match for it (a stemmed-only match, `parser.py`, `node-v20`). So this section does in
# Python exactly what SQLite does: unicode61 (tokens are runs of letters, digits and private-use
# characters; a few combining accents continue a token; case and Latin accents are folded away) and
# the porter stemmer of fts5_tokenize.c, rule for rule. The tests compare both with SQLite over
# every word of the samples and every character of the Basic Multilingual Plane; they agree except
# for characters Python's and SQLite's Unicode tables classify differently (newer scripts, symbols).

# Letters and digits (Python's word characters minus "_"), private-use characters, and the
# combining accents unicode61 keeps inside a token (sqlite3Fts5UnicodeIsdiacritic).
_ACCENTS = "\u0300-\u0304\u0306-\u030c\u030f\u0311\u031b\u0323-\u0328\u032d\u032e\u0330\u0331"
TOKEN_RE = LazyPattern("(?:[^\\W_]|[\ue000-\uf8ff])(?:[^\\W_]|[\ue000-\uf8ff%s])*" % _ACCENTS)
_FOLDED = {}


def _fold_char(c):
    folded = _FOLDED.get(c)
    if folded is None:
        import unicodedata
        low = c.casefold()
        if len(low) != 1:  # ß, ligatures: unicode61 keeps them
            low = c.lower() if len(c.lower()) == 1 else c
        parts = unicodedata.normalize("NFD", low)
        if unicodedata.combining(low):
            folded = ""  # an accent inside a token is dropped
        elif len(parts) > 1 and parts[0].isascii() and all(unicodedata.combining(p) for p in parts[1:]):
            folded = parts[0].lower()  # remove_diacritics: é -> e, but й and ί stay what they are
        else:
            folded = low
        _FOLDED[c] = folded
    return folded


def fold_token(token):
    """A token as unicode61 stores it: lower case, Latin accents removed."""
    if token.isascii():
        return token.lower()
    return "".join(_fold_char(c) for c in token)


def fts_tokens(text):
    """The tokens FTS5's unicode61 tokenizer makes of text, before stemming."""
    return [t for t in (fold_token(t) for t in TOKEN_RE.findall(text)) if t]


# Chinese and Japanese put no spaces between words, so unicode61 makes one token of a whole run of
# ideographs and kana ("无登录降级": "登录" inside it is never found), and of the Latin letters that
# touch it ("用React写"). As Lucene's CJKAnalyzer does, the text given to FTS5 has each such run set
# apart from its neighbours and written as its overlapping pairs of characters ("无登 登录 录降 降级";
# a run of one character as itself), and a query's run is the phrase of its pairs: any word of two
# characters or more inside a run is found, by the pairs it is made of (a run the index does not
# have as written is searched as its pairs, each a word: see expand_query). Hangul is paired too (Korean
# glues particles to its words: "서버에서"). Only the text given to FTS5 changes: chunks are stored
# as written, and the Matcher finds a CJK word in them as written (cjk_pattern). Measured against a
# separate trigram table (tokenize='trigram'): that finds no word of two characters, the commonest
# Chinese word length, needs SQLite 3.34 and ranks apart from docs_fts (README: How it works).
# The ranges are the Han, kana, bopomofo and hangul letters of Unicode 6.1, the tables SQLite's
# unicode61 uses (a later letter is a separator there: no pair may hold one).
_CJK = ("\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c\u3041-\u3096\u309d-\u309f"
        "\u30a1-\u30fa\u30fc-\u30ff\u3105-\u312d\u3131-\u318e\u31a0-\u31ba\u31f0-\u31ff\u3400-\u4db5"
        "\u4e00-\u9fcb\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7c6\ud7cb-\ud7fb\uf900-\ufa6d\ufa70-\ufad9"
        "\uff66-\uff9f\U00020000-\U0002a6d6\U0002a700-\U0002b734\U0002b740-\U0002b81d\U0002f800-\U0002fa1d")
_CJK_RUN = LazyPattern("[%s]+" % _CJK)
_CJK_CHAR = LazyPattern("[%s]" % _CJK)
# A first look in bytes: every CJK letter above is, in UTF-8, one of these bytes, or one of those
# followed by a byte of its range. Each is looked for with `in` or `find` (memchr: 14 looks over a
# 160 KB text take 0.03 ms; a character class of them 0.9 ms, and _CJK_CHAR, 3 ms to compile on
# every search that meets an accent or a dash, 1 ms). The second byte tells emoji (\xf0\x9f: "🤖
# Generated with Claude Code" in most commits), the variation selector after ✔️ or ⚠️ (\xef\xb8) and
# Vietnamese letters (\xe1\xba-\xbb) from CJK letters.
_CJK_LEADS = tuple(bytes([b]) for b in range(0xe3, 0xee))
_CJK_LEAD_PAIRS = ((b"\xe1", LazyPattern(rb"\xe1[\x84-\x87]")), (b"\xef", LazyPattern(rb"\xef[\xa4-\xab\xbd\xbe]")),
                   (b"\xf0", LazyPattern(rb"\xf0[\xa0-\xaf]")))   # (a literal first: the engine skips to it)


def _cjk_bytes(raw):
    """Whether UTF-8 bytes may hold a CJK letter (as _CJK counts them): a first look, never wrong when
    it says no."""
    return any(b in raw for b in _CJK_LEADS) or any(lead in raw and pair.search(raw) for lead, pair in _CJK_LEAD_PAIRS)


def has_cjk(text):
    """Whether text holds a CJK letter (as _CJK counts them)."""
    if text.isascii():
        return False
    try:
        text.encode("latin-1")   # every letter below U+0100 (é, ß, ©): a copy, no CJK; 0.5 ms less per 160 KB
        return False
    except UnicodeEncodeError:
        pass
    return _cjk_bytes(text.encode("utf-8", "surrogatepass")) and _CJK_CHAR.search(text) is not None


def _bigrams(run):
    return run if len(run) == 1 else " ".join([run[i:i + 2] for i in range(len(run) - 1)])


def cjk_bigrams(text):
    """Text as FTS5 is given it: each run of CJK letters set apart and written as its bigrams."""
    if not has_cjk(text):
        return text
    return _CJK_RUN.sub(lambda m: " %s " % _bigrams(m.group()), text)


def fts_phrase(text, prefix=False):
    """text as a quoted FTS5 string, matching what the index has for it (CJK runs as bigrams). A CJK
    character alone at its end is a prefix: the character starts the bigrams it was indexed in."""
    if has_cjk(text):
        runs = list(_CJK_RUN.finditer(text))
        if runs and len(runs[-1].group()) == 1 and not TOKEN_RE.search(text, runs[-1].end()):
            prefix = True
        text = cjk_bigrams(text)
    return '"%s"%s' % (text.replace('"', '""'), "*" if prefix else "")


def written_together(words):
    """Words as one text, a space between them, but none between two CJK ones: Chinese and Japanese
    write words without spaces, so "登录 降级" typed is "登录降级" written (its bigrams)."""
    if not any(has_cjk(w) for w in words):
        return " ".join(words)
    out = words[0] if words else ""
    for w in words[1:]:
        out += ("" if out and w and _CJK_CHAR.match(out[-1]) and _CJK_CHAR.match(w[0]) else " ") + w
    return out


def cjk_blanked(text):
    """text with its CJK letters made spaces: the other tokens FTS5 is given, at their places in text."""
    if not has_cjk(text):
        return text
    return _CJK_RUN.sub(lambda m: " " * len(m.group()), text)


def cjk_pattern(text):
    """A regular expression finding text in stored (unpaired) chunk text as the index finds its CJK
    runs: each run as written, anywhere (inside a longer run too), its other tokens as written,
    with anything but letters between them; None if text has no CJK letter."""
    if not has_cjk(text):
        return None
    pieces = []
    for token in TOKEN_RE.findall(text):
        pos = 0
        for m in _CJK_RUN.finditer(token):
            pieces += [p for p in (token[pos:m.start()], m.group()) if p]
            pos = m.end()
        if token[pos:]:
            pieces.append(token[pos:])
    return re.compile(r"[\W_]*".join(map(re.escape, pieces)), re.IGNORECASE)


def _vowel(c, y_is_vowel):
    return c in "aeiou" or (y_is_vowel and c == "y")


def _gobble_vc(w, start, end, prev_consonant):
    """Index just past the first vowels-then-consonant run of w[start:end], or 0 (fts5PorterGobbleVC):
    the Porter 'measure' counts such runs."""
    consonant, i = prev_consonant, start
    while i < end:
        consonant = not _vowel(w[i], consonant)
        if not consonant:
            break
        i += 1
    i += 1
    while i < end:
        consonant = not _vowel(w[i], consonant)
        if consonant:
            return i + 1
        i += 1
    return 0


def _m_gt0(w, n):
    return _gobble_vc(w, 0, n, False) != 0


def _m_gt1(w, n):
    k = _gobble_vc(w, 0, n, False)
    return bool(k) and _gobble_vc(w, k, n, True) != 0


def _m_eq1(w, n):
    k = _gobble_vc(w, 0, n, False)
    return bool(k) and _gobble_vc(w, k, n, True) == 0


def _cvc(w, n):
    """Porter's *o: the stem ends consonant-vowel-consonant, the last not w, x or y."""
    if w[n - 1] in "wxy":
        return False
    mask, consonant = 0, False
    for i in range(n):
        consonant = not _vowel(w[i], consonant)
        mask = (mask << 1) + consonant
    return (mask & 7) == 5


def _has_vowel(w, n):
    return any(_vowel(w[i], i > 0) for i in range(n))


def _m_gt1_s_or_t(w, n):
    return w[n - 1] in "st" and _m_gt1(w, n)


# Steps 2, 3 and 4 as fts5_tokenize.c has them: a step's rules are picked by the word's second to
# last letter and tried in order; the first whose suffix matches decides, applied or not.
_STEP2 = {
    "a": (("ational", _m_gt0, "ate"), ("tional", _m_gt0, "tion")),
    "c": (("enci", _m_gt0, "ence"), ("anci", _m_gt0, "ance")),
    "e": (("izer", _m_gt0, "ize"),),
    "g": (("logi", _m_gt0, "log"),),
    "l": (("bli", _m_gt0, "ble"), ("alli", _m_gt0, "al"), ("entli", _m_gt0, "ent"), ("eli", _m_gt0, "e"),
          ("ousli", _m_gt0, "ous")),
    "o": (("ization", _m_gt0, "ize"), ("ation", _m_gt0, "ate"), ("ator", _m_gt0, "ate")),
    "s": (("alism", _m_gt0, "al"), ("iveness", _m_gt0, "ive"), ("fulness", _m_gt0, "ful"),
          ("ousness", _m_gt0, "ous")),
    "t": (("aliti", _m_gt0, "al"), ("iviti", _m_gt0, "ive"), ("biliti", _m_gt0, "ble")),
}
_STEP3 = {
    "a": (("ical", _m_gt0, "ic"),),
    "s": (("ness", _m_gt0, ""),),
    "t": (("icate", _m_gt0, "ic"), ("iciti", _m_gt0, "ic")),
    "u": (("ful", _m_gt0, ""),),
    "v": (("ative", _m_gt0, ""),),
    "z": (("alize", _m_gt0, "al"),),
}
_STEP4 = {
    "a": (("al", _m_gt1, ""),),
    "c": (("ance", _m_gt1, ""), ("ence", _m_gt1, "")),
    "e": (("er", _m_gt1, ""),),
    "i": (("ic", _m_gt1, ""),),
    "l": (("able", _m_gt1, ""), ("ible", _m_gt1, "")),
    "n": (("ant", _m_gt1, ""), ("ement", _m_gt1, ""), ("ment", _m_gt1, ""), ("ent", _m_gt1, "")),
    "o": (("ion", _m_gt1_s_or_t, ""), ("ou", _m_gt1, "")),
    "s": (("ism", _m_gt1, ""),),
    "t": (("ate", _m_gt1, ""), ("iti", _m_gt1, "")),
    "u": (("ous", _m_gt1, ""),),
    "v": (("ive", _m_gt1, ""),),
    "z": (("ize", _m_gt1, ""),),
}


def _step(w, rules):
    for suffix, condition, replacement in rules.get(w[-2:-1], ()):
        if len(w) > len(suffix) and w.endswith(suffix):
            stem = len(w) - len(suffix)
            return w[:stem] + replacement if condition(w, stem) else w
    return w


_STEMS = {}


def porter_stem(token):
    """A folded token as FTS5's porter tokenizer stems it (fts5PorterCb): the Porter algorithm on
    the token's UTF-8 bytes, for tokens of 3 to 64 bytes; others are left as they are."""
    stem = _STEMS.get(token)
    if stem is None:
        if token.isascii():
            stem = _porter(token) if 3 <= len(token) <= 64 else token
        else:
            raw = token.encode("utf-8")
            # Bytes of non-ASCII letters are consonants to the C code and never part of a suffix:
            # stemming the bytes, one character each, is exactly what it does.
            stem = _porter(raw.decode("latin-1")).encode("latin-1").decode("utf-8", "replace") \
                if 3 <= len(raw) <= 64 else token
        if len(_STEMS) < 200000:
            _STEMS[token] = stem
    return stem


def _porter(w):
    if w[-1] == "s":  # step 1a
        if w[-2] == "e":
            w = w[:-2] if (len(w) > 4 and w[-4:-2] == "ss") or (len(w) > 3 and w[-3] == "i") else w[:-1]
        elif w[-2] != "s":
            w = w[:-1]
    n, removed = len(w), False  # step 1b
    if n > 3 and w.endswith("eed"):
        if _m_gt0(w, n - 3):
            w = w[:-1]
    elif n > 2 and w.endswith("ed"):
        if _has_vowel(w, n - 2):
            w, removed = w[:-2], True
    elif n > 3 and w.endswith("ing"):
        if _has_vowel(w, n - 3):
            w, removed = w[:-3], True
    if removed:
        n = len(w)
        if n > 2 and w[-2:] in ("at", "bl", "iz"):
            w += "e"
        elif not _vowel(w[-1], False) and w[-1] not in "lsz" and n >= 2 and w[-1] == w[-2]:
            w = w[:-1]
        elif _m_eq1(w, n) and _cvc(w, n):
            w += "e"
    if w[-1] == "y" and _has_vowel(w, len(w) - 1):  # step 1c
        w = w[:-1] + "i"
    w = _step(_step(_step(w, _STEP2), _STEP3), _STEP4)
    n = len(w)
    if w[-1] == "e" and (_m_gt1(w, n - 1) or (_m_eq1(w, n - 1) and not _cvc(w, n - 1))):  # step 5a
        w = w[:-1]
    n = len(w)
    if n > 1 and w[-1] == "l" and w[-2] == "l" and _m_gt1(w, n - 1):  # step 5b
        w = w[:-1]
    return w


def fts_terms(text):
    """What the index stores for text: its tokens, stemmed."""
    return [porter_stem(t) for t in fts_tokens(text)]


# Identifiers as words. unicode61 already splits snake_case, kebab-case and dotted names at their
# punctuation, but `handlePaymentIntentWebhook` is one token; its parts are indexed as extra text
# (a low-weight column) so that "payment intent webhook" finds it, while the whole name still
# matches (and ranks) as itself.
_CAMEL_PART_RE = LazyPattern(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_IDENT_RE = LazyPattern(r"[A-Za-z][A-Za-z0-9]+")
_CASE_CHANGE_RE = LazyPattern(r"[a-z][A-Z]|[A-Z][A-Z][a-z]")
_PARTS = {}


def split_identifier(word):
    """The parts of a camelCase, PascalCase or ACRONYMCase word, lower-cased: handlePaymentIntent ->
    [handle, payment, intent]; HTTPServerError -> [http, server, error]. [word] when it has none."""
    parts = [p.lower() for p in _CAMEL_PART_RE.findall(word)]
    return parts if len(parts) > 1 else [word.lower()]


def _name_parts(parts):
    """What is indexed for one name: its parts, then (apart) each two neighbours joined, the words
    people type whole although the name splits them (WebSocketServer: "websocket"; OAuth2Client:
    "oauth"; PostgreSQLPool: "postgresql")."""
    joins = " ".join(a + b for a, b in zip(parts, parts[1:])) if len(parts) > 2 else ""
    return " ".join(parts) + (DOC_BREAK + joins if joins else "")


def identifier_parts(text):
    """The parts of every camelCase name in text, each name once, as text to index beside it ("" if
    none). It runs over most of what is indexed, so it keeps to C-speed string methods: of the
    whitespace-delimited words (each once, in order), only those that are neither all lower case,
    all upper case nor Capitalised can hold a case change; the regular expressions see only those,
    and the parts found for a word are remembered."""
    out = []
    has_change = _CASE_CHANGE_RE.search
    for word in dict.fromkeys(text.split()):
        if word.islower() or word.isupper() or word[1:].islower() or not has_change(word):
            continue
        parts = _PARTS.get(word)
        if parts is None:
            parts = DOC_BREAK.join(_name_parts(split_identifier(w)) for w in _IDENT_RE.findall(word) if has_change(w))
            if len(_PARTS) < 100000:
                _PARTS[word] = parts
        if parts:
            out.append(parts)
    return DOC_BREAK.join(out)


VOCAB_WORD = LazyPattern(r"[a-z][a-z0-9]{3,29}")


def vocabulary(texts):
    """The words of texts worth offering as spelling corrections (lower case, 4-30 characters)."""
    words = set()
    for text in texts:
        words.update(VOCAB_WORD.findall(text.lower()))
    return words


# ==================================================================================================
# Index store: schema, connection settings, FTS5 probe, and every SQL statement on the index
# ==================================================================================================
#
# The index is a plain table of chunks plus one FTS5 table that ranks sessions (and the bookkeeping
# of the indexer: `files` with each file's size, time, checkpoint and state; `dirs`, the folders each
# source was listed from, with their times; see "Freshness" in the Indexer section):
#   chunks    every chunk of every session, in order (`seq`); the text is stored zlib-compressed
#             when that saves space: it is read only to show snippets and sessions.
#   docs_fts  one row per session "part" (consecutive chunks, up to PART_CHARS), contentless, with
#             a column per kind of text. Ranking whole sessions this way lets words spread over a
#             session's messages count together, and the column weights rank talk above tool output.
#             A contentless row is deleted by giving FTS5 its exact old text, rebuilt from `chunks`
#             (doc_columns serves both directions).
# Snippets and best matching chunks are found in Python inside the best matching part (Matcher),
# which costs far less than a second, per-chunk FTS index would at index time and on disk.
# Only plain FTS5 features are used, so an index opens with any SQLite >= 3.31 (FTS5 built in).

TOKENIZE = "porter unicode61 remove_diacritics 2"

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE files(id INTEGER PRIMARY KEY, path UNIQUE NOT NULL, source TEXT, parser TEXT NOT NULL,
    parser_version INTEGER, size INTEGER, mtime_ns INTEGER, status TEXT, reason TEXT,
    skipped INTEGER DEFAULT 0, indexed_at TEXT, checkpoint TEXT, sessions INTEGER DEFAULT 0, unknown TEXT);
CREATE INDEX files_mtime ON files(mtime_ns);
CREATE INDEX files_source ON files(source);
CREATE INDEX files_sessions ON files(sessions);
CREATE INDEX files_pending ON files(id) WHERE size < 0;
CREATE TABLE dirs(source TEXT NOT NULL, path NOT NULL, mtime_ns INTEGER, PRIMARY KEY(source, path)) WITHOUT ROWID;
CREATE TABLE sessions(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL, agent TEXT NOT NULL,
    session_id TEXT NOT NULL, path, cwd TEXT, name TEXT, created TEXT, modified TEXT,
    parent TEXT, chunk_count INTEGER, summary TEXT, labels TEXT, deleted TEXT);
CREATE INDEX sessions_file ON sessions(file_id);
CREATE INDEX sessions_sid ON sessions(session_id);
CREATE INDEX sessions_cwd ON sessions(cwd);
CREATE TABLE chunks(id INTEGER PRIMARY KEY, session INTEGER NOT NULL, seq INTEGER NOT NULL,
    kind TEXT NOT NULL, role TEXT, tool TEXT, path TEXT, ts TEXT, text NOT NULL);
CREATE INDEX chunks_session ON chunks(session, seq);
CREATE TABLE docs(id INTEGER PRIMARY KEY, session INTEGER NOT NULL, first_seq INTEGER, last_seq INTEGER);
CREATE INDEX docs_session ON docs(session, first_seq);
CREATE TABLE touched(session INTEGER NOT NULL, tool TEXT, path TEXT);
CREATE INDEX touched_session ON touched(session);
CREATE VIRTUAL TABLE docs_fts USING fts5(name, talk, tools, aside, parts, content='', tokenize='%s');
CREATE TABLE vocab(term TEXT PRIMARY KEY) WITHOUT ROWID;
""" % TOKENIZE

FTS_HASHSIZE = 32 * 1024 * 1024  # bigger in-memory batches before a flush: faster bulk builds

# What the full-text index replaced stays in it until a merge reaches it. A contentless FTS5 table
# deletes a row by adding delete markers; the old entries stay in their segment, and the largest
# segments are merged last (automerge merges segments of one size). Every session read again leaves
# such dead entries (an append re-indexes its last part; an upgrade reads every file again): after
# three upgrades the 100 MB benchmark's full-text index held 3.4 times its text (14 -> 48 MB), and an
# aged 1 GB index ranked a third slower than a fresh one (the same queries, 89 against 68 ms). The
# store counts the tokens it deletes (FTS5's own row sizes) against those it holds (FTS5's totals);
# once half as many are dead as live, index runs merge its segments into one (FTS5's 'merge' with a
# negative page count), a step at a time: `sesame index` and a server's background refresh all it
# takes (the background lends its turn between steps; 4.6 s for an aged 1 GB index), `watch`
# COMPACT_WATCH_SECONDS a round, and a search that reads something anyway COMPACT_SEARCH_SECONDS
# (after an upgrade, those that read old files again): one that only reads pays nothing, since a
# process that wrote to the index checkpoints its log when it ends (~20 ms at 1 GB).
COMPACT_PAGES = 16               # FTS pages one merge step writes (~2 ms)
COMPACT_MIN_TOKENS = 500000      # fewer dead tokens than this cost nothing worth a merge
COMPACT_SEARCH_SECONDS = 0.01
COMPACT_WATCH_SECONDS = 0.2
COMPACT_CHECKPOINT_STEPS = 8     # steps between two checkpoints of a background merge (see merge_index)
# A merge run without the index lock (see _full_round) waits between two steps, up to this long,
# while another indexer holds the lock: that indexer is about to write (a search's append), and
# SQLite's busy wait would rarely find the moment between two steps (it sleeps 1-100 ms at a time).
COMPACT_YIELD_SECONDS = 1.0
WAL_AUTOCHECKPOINT = 1000        # SQLite's default: pages written to the log before a commit copies it
WAL_SIZE_LIMIT = 64 * 2 ** 20      # bytes the log (index.sqlite-wal) is cut back to once copied in


def sqlite_varints(blob):
    """The integers of a run of SQLite varints (big-endian 7-bit groups, a 9th byte whole), as FTS5
    writes its totals and row sizes. A cut-off last one is dropped."""
    out, i, n = [], 0, len(blob)
    while i < n:
        value = 0
        for k in range(9):
            if i >= n:
                return out
            b = blob[i]
            i += 1
            if k == 8:
                value = (value << 8) | b
                break
            value = (value << 7) | (b & 0x7F)
            if b < 0x80:
                break
        out.append(value)
    return out


def check_fts5(con):
    """FTS5 is the one hard requirement; say plainly what to do when this Python's SQLite lacks it.
    Any other failure of the probe (a read-only or unreadable index, an I/O error) is raised as it is:
    the caller reports the real cause.

    SQLite lists the modules it has (3.30 on): when FTS5 is among them and the SQLite is new enough
    for the tokenizer's options (remove_diacritics 2: 3.27), the probe, a temporary FTS5 table made
    and dropped (~0.6 ms of every command), is not needed."""
    try:
        if (TOKENIZE == "porter unicode61 remove_diacritics 2"
                and tuple(int(x) for x in sqlite3.sqlite_version.split(".")[:2]) >= (3, 30)
                and con.execute("SELECT 1 FROM pragma_module_list WHERE name = 'fts5'").fetchone()):
            return
    except sqlite3.Error:
        pass  # no module list here: the probe says
    try:
        con.execute("CREATE VIRTUAL TABLE temp._sesame_probe USING fts5(x, tokenize='%s')" % TOKENIZE)
        con.execute("DROP TABLE temp._sesame_probe")
    except sqlite3.OperationalError as e:
        if "no such module" not in str(e).lower() and "tokenize" not in str(e).lower():
            raise
        raise SesameError(
            "this Python's SQLite %s lacks the FTS5 full-text module (%s)" % (sqlite3.sqlite_version, e),
            hint="run sesame with a Python whose sqlite3 has FTS5: python.org or Homebrew Python, "
                 "Debian/Ubuntu/Fedora python3, or `uv python install` (builds from 2025-07-12 on)")


def _is_corrupt(exc):
    msg = str(exc).lower()
    return any(s in msg for s in ("malformed", "not a database", "corrupt", "fts5 file format", "vtable constructor"))


BUSY_TIMEOUT = 30  # seconds a write waits for another process's write to finish


def _is_readonly(exc):
    msg = str(exc).lower()
    return any(s in msg for s in ("readonly", "read-only", "unable to open", "access permission denied"))


# Chunk texts are stored zlib-compressed from COMPRESS_MIN characters on.
COMPRESS_MIN = 1000  # shorter texts are stored as they are: zlib saves little there and costs ~10 us a call


def pack(text):
    return zlib.compress(text.encode("utf-8"), 1) if len(text) >= COMPRESS_MIN else text


DAMAGED_CHUNK = "[damaged chunk: its stored text cannot be read; `sesame index --full` rebuilds it]"


def unpack(value, strict=False):
    """A chunk's stored text as a string. Compressed bytes that were damaged on disk read as
    DAMAGED_CHUNK, so that show and search go on; `strict` (the index's own bookkeeping, which needs
    the exact text) reports them as a damaged index instead, which `index --full` repairs."""
    if not isinstance(value, bytes):
        return value
    try:
        return zlib.decompress(value).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as e:
        if strict:
            raise sqlite3.DatabaseError("database disk image is malformed: a stored chunk is damaged (%s)" % e)
        return DAMAGED_CHUNK


_TOOL_OUTPUT_RE = LazyPattern(r"\n(?:output|error):\n")  # where tool_text() puts a call's result


def doc_columns(name, chunk_rows):
    """The text of one docs_fts row: (name, talk, tools, aside, parts) from (kind, text) rows.

    Used both to insert and to delete a row; the two must produce the same text to the byte.
    """
    cols = {"talk": [], "tools": [], "aside": []}
    parts = [identifier_parts(name)] if name else []
    for kind, text in chunk_rows:
        column = KIND_COLUMN.get(kind, "aside")
        cols[column].append(text)
        # camelCase parts of what was said and of tool arguments (the command, the edit), not of
        # tool output: that is mostly code read back, where a name's parts mean little and cost much.
        if column == "talk":
            parts.append(identifier_parts(text))
        elif column == "tools":
            parts.append(identifier_parts(_TOOL_OUTPUT_RE.split(text, 1)[0]))
    # CJK runs as bigrams (see cjk_bigrams): the stored chunks keep the text as written.
    return tuple(cjk_bigrams(c) for c in (name or "", DOC_BREAK.join(cols["talk"]), DOC_BREAK.join(cols["tools"]),
                                          DOC_BREAK.join(cols["aside"]), DOC_BREAK.join(p for p in parts if p)))


# A session is empty when none of its chunks is one of these: no chunk at all (a Droid file with only
# `session_start`), or only what the agent injected and the model thought (Codex rollouts that hold
# only the environment and AGENTS.md context). Nobody worked in it, so it is no search result.
CONVERSATION_KINDS = frozenset(k for k, column in KIND_COLUMN.items() if column in ("talk", "tools"))


def cut_parts(rows, start_seq=0):
    """Cut (seq, kind, text) rows into parts of at most PART_CHARS: returns [(first, last, [(kind, text)])].

    Parts are cut greedily from the session's first chunk, so cutting again from the first chunk of
    an existing part gives exactly the parts a full rebuild would: appends only touch the tail. An
    empty session (see CONVERSATION_KINDS) gets no part, so search never ranks it (show still opens
    it); when it is written to again, it has no part to go on from and is cut from its first chunk,
    so it gets its parts as soon as it holds a conversation. (A tail cut from a later chunk belongs
    to a session that has parts, so it is not empty.)
    """
    parts, part, size, first, last, talk = [], [], 0, start_seq, start_seq - 1, start_seq > 0
    for seq, kind, text in rows:
        if part and size + len(text) > PART_CHARS:
            parts.append((first, last, part))
            part, size, first = [], 0, seq
        part.append((kind, text))
        size += len(text)
        last = seq
        talk = talk or kind in CONVERSATION_KINDS
    if not talk:
        return []
    if part or start_seq == 0:
        parts.append((first, last, part))
    return parts


# A file's row in `files`, as the indexer reads it. `status` is "ok" (indexed), "skipped" (not a
# session file), "damaged" (it was a session file and no longer parses: its last good sessions are
# kept until it parses again or is gone), "unreadable" (could not be read last time: what was indexed
# stays, it is tried again) or "deleted" (gone from disk: its sessions are kept, see
# keepDeletedSessions). `path` is as stored (see db_path).
FileRow = collections.namedtuple("FileRow", "id path source parser parser_version size mtime_ns status sessions")
FILE_COLUMNS = ", ".join(FileRow._fields)


def like_escape(s):
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Store:
    """The index database, and the only code that runs SQL on it: the Indexer decides what to write
    and Search what to rank, these methods say how (RankingQuery holds the ranking's SQL). Open with
    Store.open(); a write runs inside `transaction()` or an indexer's Batch (begin/commit).
    `readonly` is set when the index can be read but not written (see _connect_readonly)."""

    readonly = False

    def __init__(self, con, path):
        self.con, self.path = con, path
        # A process that keeps the index open (the MCP server) keeps the second connection a
        # ranking's prefetch runs on, too: a new one costs ~1.5 ms (opening, and an empty page cache).
        self.keep_spare, self._spare = False, None

    def spare(self):
        """The kept second connection, or None when this process does not keep one (see _Prefetch)."""
        if self.keep_spare and self._spare is None:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
            con.execute("PRAGMA cache_size=-32768")
            self._spare = con
        return self._spare

    @classmethod
    def open(cls, path, create=True):
        folder = os.path.dirname(path)
        if not os.path.exists(path):
            if not create:
                return None
            try:
                os.makedirs(folder, mode=0o700, exist_ok=True)
            except OSError as e:
                raise StoreError("cannot create the data directory %s: %s" % (folder, e.strerror or e))
        old_umask = os.umask(0o077)  # the index, its -wal and -shm: readable by the owner only
        try:
            return cls._connect(path)
        finally:
            os.umask(old_umask)

    @classmethod
    def _connect(cls, path):
        try:
            con = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError("cannot open the index %s: %s" % (path, e))
        store = cls(con, path)
        try:
            con.execute("PRAGMA temp_store=MEMORY")  # (first: the probe's temporary table then needs no file)
            check_fts5(con)
            con.execute("PRAGMA page_size=16384")  # takes effect on a new file only: faster FTS builds
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute("PRAGMA wal_autocheckpoint=%d" % WAL_AUTOCHECKPOINT)
            con.execute("PRAGMA journal_size_limit=%d" % WAL_SIZE_LIMIT)
            con.execute("PRAGMA cache_size=-32768")
            store._migrate()
        except sqlite3.DatabaseError as e:
            con.close()
            if _is_corrupt(e):
                return cls._rebuild_corrupt(path, e)
            if _is_readonly(e) and os.path.isfile(path):
                return cls._connect_readonly(path, e)
            raise StoreError("cannot open the index %s: %s" % (path, e))
        return store

    @classmethod
    def _connect_readonly(cls, path, exc):
        """An index that cannot be written (files 0400, a read-only mount, another user's data dir)
        still answers searches and show. SQLite opens it read-only; where it cannot even create the
        WAL's shared-memory file beside it, as immutable (the index is read as the file holds it)."""
        from urllib.parse import quote
        failure = exc
        for flags in ("mode=ro", "mode=ro&immutable=1"):
            try:
                con = sqlite3.connect("file:%s?%s" % (quote(os.path.abspath(path)), flags), uri=True,
                                      timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as e:
                failure = e
                continue
            store = cls(con, path)
            store.readonly = True
            try:
                check_fts5(con)
                con.execute("PRAGMA temp_store=MEMORY")
                version = store._schema_version()
            except sqlite3.DatabaseError as e:
                con.close()
                failure = e
                continue
            if version != SCHEMA_VERSION:
                con.close()
                raise StoreError("the index %s cannot be written (%s) and needs a rebuild: it was written by "
                                  "another Sesame (schema %s; this one reads %d)" % (path, exc, version, SCHEMA_VERSION),
                                  hint="make it writable, or point SESAME_DATA_DIR elsewhere")
            return store
        raise StoreError("cannot open the index %s: %s (read-only: %s)" % (path, exc, failure),
                          hint="check the permissions of %s and the files in it" % os.path.dirname(path))

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
            raise StoreError("the index %s is corrupt (%s) and cannot be moved aside: %s" % (path, exc, e),
                              hint="delete it and run `sesame index --full`")
        _stderr("sesame: the index was corrupt (%s); moved it to %s and rebuilding" % (exc, aside))
        return cls._connect(path)

    def _schema_version(self):
        if not self.con.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            return None
        row = self.con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row else None

    def _check_version(self, version):
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError("the index %s was written by a newer Sesame (schema %d; this one reads %d)"
                              % (self.path, version, SCHEMA_VERSION),
                              hint="upgrade sesame, or point SESAME_DATA_DIR elsewhere")

    def _migrate(self):
        version = self._schema_version()
        if version == SCHEMA_VERSION:
            return
        self._check_version(version)
        with self.transaction():
            # Read again under the write lock: another process may have built the schema (and indexed)
            # since the look above; building it again would wipe that work.
            version = self._schema_version()
            if version == SCHEMA_VERSION:
                return
            self._check_version(version)
            self._create_schema()

    def _create_schema(self):
        """Drop whatever is there and create the current schema (inside the caller's transaction)."""
        con = self.con
        self._drop_all()
        for stmt in SCHEMA.split(";"):
            if stmt.strip():
                con.execute(stmt)
        con.execute("INSERT INTO docs_fts(docs_fts, rank) VALUES('hashsize', %d)" % FTS_HASHSIZE)
        self.set_meta("schema_version", SCHEMA_VERSION)
        self.set_meta("created", iso(now_utc()))
        self._fts_merged()   # (see COMPACT_PAGES)

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


    def transaction(self):
        return _Transaction(self.con)

    def meta(self, key, default=None):
        row = self.con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key, value):
        self.con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, str(value)))

    # What status and sources read (the application layer runs no SQL of its own).

    def agent_totals(self):
        """[(agent, sessions, chunks, sessions kept from deleted files)], by agent."""
        return self.con.execute("SELECT agent, count(*), coalesce(sum(chunk_count), 0), sum(deleted IS NOT NULL) "
                                "FROM sessions GROUP BY agent ORDER BY agent").fetchall()

    def unrecognized_records(self):
        """[(parser id, {"types": {type: count}, "versions": [...]})] of the files whose parse met
        records it did not know (see ParseReport.unrecognized)."""
        out = []
        for parser_id, unknown in self.con.execute("SELECT parser, unknown FROM files WHERE unknown IS NOT NULL"):
            try:
                seen = json.loads(unknown)
            except BAD_JSON:
                continue
            if isinstance(seen, dict):
                out.append((parser_id, seen))
        return out

    def files_not_indexed(self, limit=1000):
        """[(path, parser id, status, reason)] of the files that are neither indexed nor gone, and how many."""
        where = "status NOT IN ('ok', 'deleted')"
        rows = self.con.execute("SELECT path, parser, status, reason FROM files WHERE %s ORDER BY status, path LIMIT ?"
                                % where, (limit,)).fetchall()
        return rows, self.con.execute("SELECT count(*) FROM files WHERE %s" % where).fetchone()[0]

    def session_count(self):
        return self.con.execute("SELECT count(*) FROM sessions").fetchone()[0]

    def last_seq(self, sid):
        """The last chunk number of a session (row id), -1 when it has none."""
        last = self.con.execute("SELECT max(seq) FROM chunks WHERE session=?", (sid,)).fetchone()[0]
        return -1 if last is None else last

    def chunks(self, sid, lo, hi):
        """(seq, kind, role, tool, timestamp, text) of a session's chunks lo..hi, text unpacked."""
        return [(seq, kind, role, tool, ts, unpack(text)) for seq, kind, role, tool, ts, text in self.con.execute(
            "SELECT seq, kind, role, tool, ts, text FROM chunks WHERE session=? AND seq BETWEEN ? AND ? ORDER BY seq",
            (sid, lo, hi))]

    def read_again(self, paths):
        """Have these files read again from the start at the next refresh."""
        with self.transaction():
            for path in paths:
                self.con.execute("UPDATE files SET size=-1, checkpoint=NULL WHERE path=?", (db_path(path),))

    def file_states(self):
        """{parser id: Counter(file status -> count)}."""
        out = collections.defaultdict(collections.Counter)
        for parser_id, status, n in self.con.execute("SELECT parser, status, count(*) FROM files GROUP BY parser, status"):
            out[parser_id][status or "ok"] += n
        return out

    def size_bytes(self):
        return sum(os.path.getsize(self.path + ext) for ext in ("", "-wal") if os.path.exists(self.path + ext))

    # -- The indexer's writes: the Indexer section decides what to write, these say how ----------

    def begin(self):
        """Open a write transaction (Batch: committed in turns, not through transaction())."""
        self.con.execute("BEGIN IMMEDIATE")

    def commit(self):
        self.con.execute("COMMIT")

    def rollback(self):
        try:
            self.con.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def add_words(self, words):
        """Add words to the spelling vocabulary (see near_words)."""
        self.con.executemany("INSERT OR IGNORE INTO vocab(term) VALUES(?)", ((w,) for w in sorted(words)))

    def _part_rows(self, sid, first, last):
        return [(k, unpack(t, strict=True)) for k, t in self.con.execute(
            "SELECT kind, text FROM chunks WHERE session=? AND seq BETWEEN ? AND ? ORDER BY seq", (sid, first, last))]

    def delete_parts(self, sid, name, from_seq=0):
        """Delete the session's parts that hold chunks from seq `from_seq` on (all parts by default)."""
        con = self.con
        dead = 0
        for doc_id, first, last, size in con.execute(
                "SELECT d.id, first_seq, last_seq, z.sz FROM docs d LEFT JOIN docs_fts_docsize z ON z.id = d.id "
                "WHERE session=? AND (last_seq >= ? OR first_seq >= ?)", (sid, from_seq, from_seq)).fetchall():
            con.execute("INSERT INTO docs_fts(docs_fts, rowid, name, talk, tools, aside, parts) "
                        "VALUES('delete', ?, ?, ?, ?, ?, ?)",
                        (doc_id,) + doc_columns(name, self._part_rows(sid, first, last)))
            con.execute("DELETE FROM docs WHERE id=?", (doc_id,))
            dead += sum(sqlite_varints(size)) if isinstance(size, bytes) else 0
        if dead:   # (an index from before the count keeps no count: it is merged once, see merge_due)
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key='fts_dead'", (dead,))

    def merge_due(self):
        """Whether the full-text index holds at least half as many dead tokens as live ones (and enough
        to matter), or a merge of it is under way (see COMPACT_PAGES). An index that kept no count is
        merged once."""
        if self.meta("fts_merging") is not None:
            return True
        row = self.con.execute("SELECT block FROM docs_fts_data WHERE id=1").fetchone()   # FTS5's totals:
        live = sum(sqlite_varints(row[0])[1:]) if row and isinstance(row[0], bytes) else 0   # rows, each column's tokens
        try:
            dead = int(self.meta("fts_dead"))
        except (TypeError, ValueError):
            dead = live
        return dead >= COMPACT_MIN_TOKENS and 2 * dead >= live

    def _fts_merged(self):
        """The full-text index holds no dead entries to speak of: no merge due, none under way."""
        self.set_meta("fts_dead", 0)
        self.con.execute("DELETE FROM meta WHERE key='fts_merging'")

    def checkpoint(self):
        """Copy what the log holds into the index file, as far as readers allow, without waiting."""
        self.con.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def merge_step(self):
        """One step of merging the full-text index's segments into one, in the caller's transaction;
        True when the merge is done (the dead entries of the segments it took are gone).

        The first step starts a merge of every segment there is (FTS5's 'merge' with a negative page
        count); the next go on with that merge (a positive count), in this run or a later one. Each
        negative step would start again from the start when a segment was written since (an append
        indexed between two steps): a merge spread over `watch` rounds beside a working agent never
        ended. The segments written meanwhile are left to FTS5's own merges."""
        before, start = self.con.total_changes, self.meta("fts_merging") is None
        self.con.execute("INSERT INTO docs_fts(docs_fts, rank) VALUES('merge', ?)",
                         (-COMPACT_PAGES if start else COMPACT_PAGES,))
        if self.con.total_changes - before < 2:   # (FTS5's documented sign of a merge that did nothing)
            self._fts_merged()
            return True
        if start:
            self.set_meta("fts_merging", 1)
        return False

    def insert_parts(self, sid, parts):
        """Index (first, last, columns) parts of one session in docs_fts."""
        con = self.con
        for first, last, cols in parts:
            doc = con.execute("INSERT INTO docs(session, first_seq, last_seq) VALUES(?,?,?)", (sid, first, last)).lastrowid
            con.execute("INSERT INTO docs_fts(rowid, name, talk, tools, aside, parts) VALUES(?,?,?,?,?,?)", (doc,) + cols)

    def build_parts(self, sid, name, from_seq):
        """Re-cut and index the session's parts from chunk `from_seq` (a part start) on, from the index."""
        rows = ((seq, kind, unpack(text, strict=True)) for seq, kind, text in self.con.execute(
            "SELECT seq, kind, text FROM chunks WHERE session=? AND seq >= ? ORDER BY seq", (sid, from_seq)))
        self.insert_parts(sid, [(f, l, doc_columns(name, p)) for f, l, p in cut_parts(rows, from_seq)])

    def _delete_sessions(self, where, params=()):
        """Remove the sessions matching a condition on `sessions`, with their chunks and ranking rows."""
        con = self.con
        for sid, labels in con.execute("SELECT id, labels FROM sessions WHERE %s" % where, params).fetchall():
            self.delete_parts(sid, labels)
            for table, col in (("chunks", "session"), ("touched", "session"), ("sessions", "id")):
                con.execute("DELETE FROM %s WHERE %s=?" % (table, col), (sid,))

    def delete_file_sessions(self, file_id, session_ids=None):
        """Remove the sessions read from a file (not those kept as deleted: see keep_vanished), or
        those of them with these session ids."""
        if session_ids is None:
            self._delete_sessions("file_id=? AND deleted IS NULL", (file_id,))
        ids = list(session_ids or ())
        for at in range(0, len(ids), 500):  # (SQLite's limit on parameters)
            chunk = ids[at:at + 500]
            self._delete_sessions("file_id=? AND deleted IS NULL AND session_id IN (%s)" % ",".join("?" * len(chunk)),
                                  [file_id] + chunk)

    def delete_kept_copies(self, agent, session_id, machine=None, mirrors=None):
        """Remove the copies of a session kept from files now gone (the session moved to another file),
        of the same machine only when `mirrors` (<data dir>/remotes/) is given: ids repeat across
        machines. `machine`: the remote's mirror folder the session's file is in; None: this machine
        (files outside the mirrors)."""
        where, params = "agent=? AND session_id=? AND deleted IS NOT NULL", [agent, session_id]
        if mirrors:
            folder = machine or mirrors
            where += " AND (substr(path, 1, ?) %s ?)" % ("=" if machine else "IS NOT")
            params += [len(folder), folder]
        self._delete_sessions(where, params)

    def write_session(self, file_id, prep, existing=None, from_seq=0):
        """Write a prepared session, or (existing = its row id) replace its chunks from seq `from_seq` on.

        Returns the session's row id. Only the parts from the one holding `from_seq` are rebuilt, and
        all of them when the name changed (the name is indexed with every part).
        """
        con = self.con
        meta = prep.meta._replace(path=db_path(prep.meta.path))  # the columns of `sessions`, in order
        labels = meta.labels
        if existing is None:
            sid = con.execute("INSERT INTO sessions(file_id, agent, session_id, path, cwd, name, created, modified, "
                              "parent, summary, labels, chunk_count) VALUES(?,?,?,?,?,?,?,?,?,?,?,0)",
                              (file_id,) + meta).lastrowid
            part_from = 0
        else:
            sid = existing
            old_labels = con.execute("SELECT labels FROM sessions WHERE id=?", (sid,)).fetchone()[0]
            if old_labels == labels and self._same_chunks(sid, from_seq, prep.rows):
                # Nothing that is ranked or shown changed (a file only touched, restored from a backup,
                # or grown by records without text): its parts are not cut and indexed again.
                con.execute("UPDATE sessions SET agent=?, session_id=?, path=?, cwd=?, name=?, created=?, modified=?, "
                            "parent=?, summary=?, labels=? WHERE id=?", meta + (sid,))
                self._add_touched(sid, prep.touched)
                return sid
            row = con.execute("SELECT max(first_seq) FROM docs WHERE session=? AND first_seq <= ?", (sid, from_seq)).fetchone()
            part_from = 0 if old_labels != labels or row[0] is None else row[0]
            self.delete_parts(sid, old_labels, part_from)
            con.execute("DELETE FROM chunks WHERE session=? AND seq >= ?", (sid, from_seq))
            con.execute("UPDATE sessions SET agent=?, session_id=?, path=?, cwd=?, name=?, created=?, modified=?, parent=?, "
                        "summary=?, labels=? WHERE id=?", meta + (sid,))
        con.executemany("INSERT INTO chunks(session, seq, kind, role, tool, path, ts, text) VALUES(?,?,?,?,?,?,?,?)",
                        [(sid, from_seq + i) + r for i, r in enumerate(prep.rows)])
        con.execute("UPDATE sessions SET chunk_count=? WHERE id=?", (from_seq + len(prep.rows), sid))
        if existing is None and prep.parts is not None:
            self.insert_parts(sid, prep.parts)
        else:
            self.build_parts(sid, labels, part_from)
        self._add_touched(sid, prep.touched, existing is not None)
        return sid

    def _add_touched(self, sid, touched, known=True):
        """Record the (tool, path) pairs a session touched that are not recorded yet."""
        touched = set(touched)
        if known:
            touched -= set(self.con.execute("SELECT tool, path FROM touched WHERE session=?", (sid,)).fetchall())
        self.con.executemany("INSERT INTO touched(session, tool, path) VALUES(?,?,?)", [(sid, t, p) for t, p in sorted(touched)])

    def _same_chunks(self, sid, from_seq, rows):
        """Whether the session's stored chunks from seq `from_seq` on are these rows (kind, role, tool,
        path, ts, packed text), text compared unpacked (zlib may pack the same text apart)."""
        old = self.con.execute("SELECT kind, role, tool, path, ts, text FROM chunks WHERE session=? AND seq >= ? "
                               "ORDER BY seq", (sid, from_seq)).fetchall()
        return len(old) == len(rows) and all(a[:5] == tuple(b[:5]) and unpack(a[5]) == unpack(b[5])
                                             for a, b in zip(old, rows))

    def forget_session(self, agent, session_id):
        """Delete every copy of a session so that its text is gone from the index file, not only from
        its tables (`sesame forget`): deleted rows are overwritten (secure_delete), its words leave the
        spelling vocabulary unless another session has them, and the FTS index is merged into one
        segment, since a contentless FTS5 delete only adds a marker beside the old entries. One
        transaction: on any failure the index is as it was. See wipe_free_space."""
        con = self.con
        con.execute("PRAGMA secure_delete=ON")
        talk = [k for k, column in KIND_COLUMN.items() if column == "talk"]
        with self.transaction():
            rows = con.execute("SELECT id, labels, file_id FROM sessions WHERE agent=? AND session_id=?",
                               (agent, session_id)).fetchall()
            words = vocabulary([labels or "" for _, labels, _ in rows])
            for sid, _, _ in rows:
                words |= vocabulary(unpack(t) for (t,) in con.execute(
                    "SELECT text FROM chunks WHERE session=? AND kind IN (%s)" % ",".join("?" * len(talk)), [sid] + talk))
            # A resumable parser's checkpoint carries some of the session's state (its name): the next
            # change to the file reads it whole instead.
            con.executemany("UPDATE files SET checkpoint=NULL WHERE id=?", {(file_id,) for _, _, file_id in rows})
            self._delete_sessions("agent=? AND session_id=?", (agent, session_id))
            for w in sorted(words):
                if not con.execute("SELECT 1 FROM docs_fts WHERE docs_fts MATCH ? LIMIT 1", ('"%s"' % w,)).fetchone():
                    con.execute("DELETE FROM vocab WHERE term=?", (w,))
            con.execute("INSERT INTO docs_fts(docs_fts) VALUES('optimize')")
            self._fts_merged()

    def drop_files_under(self, prefix):
        """Forget every file below a folder (a remote's mirror that is removed): its sessions, rows
        and listings go, none kept as deleted (the user removed the machine, not an agent its file)."""
        where = "substr(path, 1, ?) = ?"
        self._delete_sessions("file_id IN (SELECT id FROM files WHERE %s)" % where, (len(prefix), prefix))
        self.con.execute("DELETE FROM files WHERE " + where, (len(prefix), prefix))
        self.con.execute("DELETE FROM dirs WHERE substr(source, 1, ?) = ?", (len(prefix), prefix))

    def child_sessions(self, session_id):
        """[(session id, name)] of the sessions whose parent is `session_id` (its sub-agents), oldest first."""
        return self.con.execute("SELECT session_id, name FROM sessions WHERE parent = ? ORDER BY created",
                                (session_id,)).fetchall()

    def session_files(self, agent, session_id):
        """The files that hold a copy of a session (an agent's database and its older JSON files can
        both have it), as Python opens them."""
        return [fs_path(p) for (p,) in self.con.execute(
            "SELECT DISTINCT f.path FROM files f JOIN sessions s ON s.file_id = f.id "
            "WHERE s.agent=? AND s.session_id=? AND s.deleted IS NULL ORDER BY f.path", (agent, session_id))]

    def wipe_free_space(self):
        """Rewrite the index file without its free pages and checkpoint the WAL to zero bytes, so that
        text deleted before secure_delete was on (old versions of a session, FTS segments merged away)
        is in no byte of index.sqlite, -wal or -shm. Needs free disk space about the index's size."""
        con = self.con
        con.execute("PRAGMA temp_store=FILE")  # VACUUM's copy on disk, not in memory (the index can be GBs)
        try:
            con.execute("VACUUM")
        finally:
            con.execute("PRAGMA temp_store=MEMORY")
        busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise sqlite3.OperationalError("database is locked (another process is reading the index)")

    def file_gone(self, row, keep=True):
        """A file is no longer listed. Its sessions are kept, marked deleted, when the file is really gone
        from disk (agents delete old transcripts; the index still has their text); they are removed when
        the file is still there but no longer wanted (excluded, no longer under a configured source)."""
        # (Gone: no file there, or no regular one: a folder, a FIFO or a dangling link put in its place
        # takes nothing away, as a file deleted does not. Still a file there: no longer listed, so
        # no longer wanted.)
        if keep and row.sessions and not os.path.isfile(fs_path(row.path)):
            self.con.execute("UPDATE sessions SET deleted=? WHERE file_id=? AND deleted IS NULL", (iso(now_utc()), row.id))
            self.con.execute("UPDATE files SET status='deleted', size=-1, checkpoint=NULL WHERE id=?", (row.id,))
        else:
            self._delete_sessions("file_id=?", (row.id,))
            self.con.execute("DELETE FROM files WHERE id=?", (row.id,))

    def clear_index(self, policy):
        """Empty the index for a rebuild, except the sessions kept from files that are gone: they cannot
        be read again, so they stay (unless the policy now excludes them), their ranking rows rebuilt."""
        con = self.con
        kept = con.execute("SELECT id, labels, agent, session_id, cwd FROM sessions WHERE deleted IS NOT NULL").fetchall()
        con.execute("INSERT INTO docs_fts(docs_fts) VALUES('delete-all')")
        self._fts_merged()
        con.execute("DELETE FROM docs")
        if kept:
            for table, col in (("chunks", "session"), ("touched", "session")):
                con.execute("DELETE FROM %s WHERE %s NOT IN (SELECT id FROM sessions WHERE deleted IS NOT NULL)" % (table, col))
        else:
            con.execute("DELETE FROM chunks")
            con.execute("DELETE FROM touched")
        con.execute("DELETE FROM sessions WHERE deleted IS NULL")
        con.execute("DELETE FROM files WHERE status != 'deleted'")
        con.execute("DELETE FROM dirs")
        for sid, labels, agent, session_id, cwd in kept:
            if policy.redact:  # the rules may have changed since it was indexed
                con.executemany("UPDATE chunks SET text=? WHERE id=?", [
                    (pack(redact(unpack(text))[0]), cid)
                    for cid, text in con.execute("SELECT id, text FROM chunks WHERE session=?", (sid,)).fetchall()])
            self.build_parts(sid, labels, 0)
            if not policy.keeps(agent, session_id, cwd):
                self._delete_sessions("id=?", (sid,))
        con.execute("DELETE FROM files WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.file_id = files.id)")

    def keep_vanished(self, file_id, present):
        """Sessions an agent deleted from a file that goes on holding others (a database: Hermes prunes
        old sessions, OpenCode and Cursor delete chats) are kept like those of deleted files: marked
        deleted, searchable, shown from the index. `present`: the (agent, session id) the file holds now."""
        now = iso(now_utc())
        self.con.executemany("UPDATE sessions SET deleted=? WHERE id=?", [
            (now, sid) for sid, agent, session_id in self.con.execute(
                "SELECT id, agent, session_id FROM sessions WHERE file_id=? AND deleted IS NULL", (file_id,)).fetchall()
            if (agent, session_id) not in present])

    def file_sessions(self, file_id):
        """{(agent, session id): row id} of the sessions indexed from a file."""
        return {(agent, session_id): sid for sid, agent, session_id in
                self.con.execute("SELECT id, agent, session_id FROM sessions WHERE file_id=?", (file_id,))}

    def first_session(self, file_id):
        """The row id of a session indexed from a file (the one a resumable file holds), or None."""
        row = self.con.execute("SELECT id FROM sessions WHERE file_id=?", (file_id,)).fetchone()
        return row[0] if row else None

    def packed_chunks(self, sid):
        """A session's chunk rows as stored: (kind, role, tool, path, ts, packed text), in order."""
        return self.con.execute("SELECT kind, role, tool, path, ts, text FROM chunks WHERE session=? ORDER BY seq",
                                (sid,)).fetchall()

    def add_file(self, path, parser_id):
        """A new row in `files` (filled in by file_read); returns its id."""
        return self.con.execute("INSERT INTO files(path, parser) VALUES(?, ?)", (db_path(path), parser_id)).lastrowid

    def file_unreadable(self, file_id, job, reason):
        """A file that could not be read now: what was indexed from it stays; tried again next run."""
        if file_id is None:
            self.con.execute("INSERT INTO files(path, source, parser, parser_version, size, mtime_ns, status, reason) "
                             "VALUES(?,?,?,?,-1,?,'unreadable',?)", (db_path(job.path), job.source, job.parser.id,
                                                                     job.parser.version, job.stat.st_mtime_ns, reason))
        else:
            self.con.execute("UPDATE files SET status='unreadable', reason=? WHERE id=?", (reason, file_id))

    def file_damaged(self, file_id, st, reason):
        """A file that held sessions and no longer parses: they are kept; it is looked at when it changes."""
        self.con.execute("UPDATE files SET status='damaged', reason=?, size=?, mtime_ns=?, indexed_at=? WHERE id=?",
                         (reason, st.st_size, st.st_mtime_ns, iso(now_utc()), file_id))

    def file_read(self, file_id, job, size, status, reason, skipped, checkpoint, unknown):
        """Record what a read of a file gave (`size` -1: not read to its end yet), and how many sessions
        the index holds from it."""
        count = self.con.execute("SELECT count(*) FROM sessions WHERE file_id=?", (file_id,)).fetchone()[0]
        self.con.execute("UPDATE files SET source=?, parser=?, parser_version=?, size=?, mtime_ns=?, status=?, reason=?, "
                         "skipped=?, indexed_at=?, checkpoint=?, sessions=?, unknown=? WHERE id=?",
                         (job.source, job.parser.id, job.parser.version, size, job.stat.st_mtime_ns, status, reason,
                          skipped, iso(now_utc()), json.dumps(checkpoint) if checkpoint else None, count,
                          json.dumps(unknown) if unknown else None, file_id))

    def file_touched(self, file_id, mtime_ns):
        """A file whose time alone moved (see _time_alone): its new time, nothing else."""
        self.con.execute("UPDATE files SET mtime_ns=? WHERE id=?", (mtime_ns, file_id))

    def file_checkpoint(self, file_id):
        """The checkpoint stored with a file (a dict, see Parser.checkpoint_holds), or None."""
        return json.loads(self.con.execute("SELECT checkpoint FROM files WHERE id=?", (file_id,)).fetchone()[0] or "null")

    def set_listings(self, listings, settled, session_roots=()):
        """Record the folders each source was listed from ({source: [(folder, mtime_ns)]}); a folder
        changed after `settled` (ns) is recorded with time 0, so that it is listed again. Of the
        sources in `session_roots` (Parser.session_folders), the folders two levels down or more
        are recorded under source + SESSION_DIRS: a search compares those with their session's file
        (session_folders), not all of them (listings(sources) leaves them out by the key alone)."""
        for source, dirs in listings.items():
            self.con.execute("DELETE FROM dirs WHERE source IN (?, ?)", (source, source + SESSION_DIRS))
            own, cut = source + SESSION_DIRS, len(source.rstrip(os.sep)) + 1
            deep = source in session_roots
            self.con.executemany("INSERT OR REPLACE INTO dirs(source, path, mtime_ns) VALUES(?,?,?)",
                                 [(own if deep and os.sep in d[cut:] else source, db_path(d), m if m < settled else 0)
                                  for d, m in dirs])

    def move_files(self, moved):
        """Files now listed first by another source: [(source, path)]."""
        self.con.executemany("UPDATE files SET source=? WHERE path=?", moved)

    def drop_emptied_files(self):
        """Rows of files gone whose sessions all moved to other files."""
        self.con.execute("DELETE FROM files WHERE status='deleted' AND NOT EXISTS "
                         "(SELECT 1 FROM sessions s WHERE s.file_id = files.id)")

    # -- What the indexer reads of its own records (see Freshness in the Indexer section) ----------

    def _file_rows(self, where="1", params=()):
        return [FileRow(*r) for r in self.con.execute("SELECT %s FROM files WHERE %s" % (FILE_COLUMNS, where), params)]

    def file_row(self, path):
        """The FileRow of a path as stored (see db_path), or None."""
        rows = self._file_rows("path = ?", (path,))
        return rows[0] if rows else None

    def file_rows_of(self, source, parser_id):
        """The FileRows of the files a source (its root and parser) listed first."""
        return self._file_rows("source = ? AND parser = ?", (source, parser_id))

    def file_rows_at(self, paths):
        """The FileRows of these stored paths."""
        return [row for i in range(0, len(paths), 500)  # (older SQLite takes at most 999 parameters)
                for row in self._file_rows("path IN (%s)" % ",".join("?" * len(paths[i:i + 500])), paths[i:i + 500])]

    def file_rows_by_id(self, ids):
        return [row for i in range(0, len(ids), 500)
                for row in self._file_rows("id IN (%s)" % ",".join("?" * len(ids[i:i + 500])), ids[i:i + 500])]

    def active_file_rows(self, since_ns, limit):
        """The `limit` newest files written since `since_ns`, not gone."""
        return self._file_rows("mtime_ns >= ? AND status != 'deleted' ORDER BY mtime_ns DESC LIMIT ?", (since_ns, limit))

    def shared_file_rows(self):
        """The files holding several sessions (agent databases), not gone."""
        return self._file_rows("sessions > 1 AND status != 'deleted'")

    def pending_file_rows(self):
        """The files read in part, or marked to be read again (size -1), not gone."""
        return self._file_rows("size < 0 AND status != 'deleted'")

    def version_stale_rows(self, versions, limit=None):
        """The `limit` latest files indexed by another version of their parser than `versions`
        ({parser id: version}), not gone; their number when `limit` is None."""
        ids = sorted(versions)
        where = "status = 'ok' AND (%s)" % " OR ".join(["(parser = ? AND parser_version != ?)"] * len(ids))
        params = [v for pid in ids for v in (pid, versions[pid])]
        if limit is None:
            return self.con.execute("SELECT count(*) FROM files WHERE " + where, params).fetchone()[0]
        return self._file_rows(where + " ORDER BY mtime_ns DESC LIMIT %d" % limit, params)

    def cwd_file_rows(self, folders, limit):
        """The newest `limit` files of the sessions run in one of these folders."""
        return self._file_rows("status != 'deleted' AND id IN (SELECT file_id FROM sessions WHERE cwd IN (%s)) "
                               "ORDER BY mtime_ns DESC LIMIT %d" % (",".join("?" * len(folders)), limit), folders)

    def session_file_rows(self, agent, session_ids):
        """The files holding the sessions of an agent with these ids, not gone."""
        ids, rows = sorted(session_ids), []
        for i in range(0, len(ids), 500):  # (older SQLite takes at most 999 parameters)
            batch = ids[i:i + 500]
            rows += self._file_rows("status != 'deleted' AND id IN (SELECT file_id FROM sessions WHERE agent = ? "
                                    "AND session_id IN (%s))" % ",".join("?" * len(batch)), [agent] + batch)
        return rows

    def file_stats(self):
        """{stored path: (parser, parser_version, size, mtime_ns, status, source)} of every file."""
        return {r[0]: r[1:] for r in self.con.execute("SELECT path, parser, parser_version, size, mtime_ns, status, source "
                                                      "FROM files")}

    def listings(self, sources=None):
        """{source: [(folder, mtime_ns)]}: the folders each source (of `sources`, else all) was listed
        from, in order; the folders of one session's own are kept apart (see set_listings)."""
        out = collections.defaultdict(list)
        sql, params = "SELECT source, path, mtime_ns FROM dirs", ()
        if sources is not None:
            sql, params = sql + " WHERE source IN (%s)" % ",".join("?" * len(sources)), tuple(sources)
        for source, path, mtime in self.con.execute(sql + " ORDER BY source, path", params):
            out[source].append((fs_path(path), mtime))
        return out

    def session_folders(self, source, folder, below_only=False):
        """[(folder, mtime_ns)] of a session's own folder and the folders in it (see set_listings);
        with below_only, of every such folder below `folder` (the source's own: all of them)."""
        low = db_path(folder)
        if not isinstance(low, str):
            return []
        return [(fs_path(p), m) for p, m in self.con.execute(
            "SELECT path, mtime_ns FROM dirs WHERE source = ? AND (path = ? OR (path >= ? AND path < ?))",
            (source + SESSION_DIRS, None if below_only else low, low + os.sep, low + os.sep + "\uffff"))]

    def session_folder_count(self, source):
        """How many folders of a source's sessions' own are known (see set_listings)."""
        return self.con.execute("SELECT count(*) FROM dirs WHERE source = ?", (source + SESSION_DIRS,)).fetchone()[0]

    def session_folders_share(self, source, share, count):
        """[(folder, mtime_ns)]: the `share`-th of `count` slices, in path order, of the folders of
        a source's sessions' own (those of one session stay together)."""
        key = source + SESSION_DIRS
        n = self.con.execute("SELECT count(*) FROM dirs WHERE source = ?", (key,)).fetchone()[0]
        size = -(-n // count)
        return [(fs_path(p), m) for p, m in self.con.execute(
            "SELECT path, mtime_ns FROM dirs WHERE source = ? ORDER BY path LIMIT ? OFFSET ?", (key, size, share * size))]

    def source_paths(self, source, parser_id):
        """The stored paths of the files a source (its root and parser) listed first."""
        return [p for (p,) in self.con.execute("SELECT path FROM files WHERE source=? AND parser=?", (source, parser_id))]

    def file_rows_under(self, source, parser_id, folder):
        """The FileRows of a source's files below `folder`, not gone."""
        low = folder.rstrip(os.sep) + os.sep
        if not isinstance(db_path(low), str):
            return []  # (a name that is not UTF-8: its files are left to the other rules)
        return self._file_rows("source = ? AND parser = ? AND status != 'deleted' AND path >= ? AND path < ?",
                               (source, parser_id, low, low + "\uffff"))

    def source_file_stats(self, source, parser_id):
        """(id, path, size, mtime_ns, parser_version) of the files a source listed first, not gone, in id order."""
        return self.con.execute("SELECT id, path, size, mtime_ns, parser_version FROM files WHERE source = ? AND "
                                "parser = ? AND status != 'deleted' ORDER BY id", (source, parser_id)).fetchall()

    def files_after(self, start):
        """(id, path, source, parser, parser_version, size, mtime_ns) of the indexed files in id order,
        from just after `start`, then from the first up to `start`."""
        for low, high in ((start, None), (0, start)):
            last = low
            while True:
                rows = self.con.execute("SELECT id, path, source, parser, parser_version, size, mtime_ns FROM files "
                                        "WHERE id > ?%s AND status != 'deleted' ORDER BY id LIMIT 256"
                                        % ("" if high is None else " AND id <= %d" % high), (last,)).fetchall()
                if not rows:
                    break
                yield from rows
                last = rows[-1][0]

    # -- What a search reads: word counts, the vocabulary, the ranking, sessions and their chunks --

    def doc_count(self, fts, limit=3):
        """In how many ranking documents an FTS5 string occurs, counted up to `limit` (cheap: FTS5 only
        walks the word's list of documents, and stops there)."""
        return self.con.execute("SELECT count(*) FROM (SELECT 1 FROM docs_fts WHERE docs_fts MATCH ? LIMIT ?)",
                                (fts, limit)).fetchone()[0]

    def part_count(self):
        """How many ranking documents (session parts) the index holds."""
        return self.con.execute("SELECT count(*) FROM docs").fetchone()[0]

    def vocab_terms(self, first, shortest, longest):
        """The vocabulary words that start with `first` and are shortest..longest characters long."""
        return [term for (term,) in self.con.execute(
            "SELECT term FROM vocab WHERE term >= ? AND term < ? AND length(term) BETWEEN ? AND ?",
            (first, first + "\uffff", shortest, longest))]

    def ranking(self, filters, excluded=()):
        """The ranking query of one search, with its filters (see RankingQuery)."""
        return RankingQuery(self, filters, excluded)

    def match_chunks(self, sid, part, tools_only=False, tools=()):
        """(seq, kind, role, tool, timestamp, text) of the chunks a match is looked for in: those of
        the part (first, last seq), or with `tools` the calls of those tools anywhere in the session;
        with `tools_only`, tool calls only."""
        sql = "SELECT seq, kind, role, tool, ts, text FROM chunks WHERE session=?"
        params = [sid]
        if tools_only:
            sql += " AND kind = 'tool'"
        if tools:
            sql += " AND lower(tool) IN (%s)" % ",".join("?" * len(tools))
            params += tools
        else:
            sql += " AND seq BETWEEN ? AND ?"
            params += list(part)
        return [(seq, kind, role, tool, ts, unpack(text))
                for seq, kind, role, tool, ts, text in self.con.execute(sql + " ORDER BY seq", params)]

    def first_user_text(self, sid):
        """The text of a session's first user chunk, "" when it has none."""
        row = self.con.execute("SELECT text FROM chunks WHERE session=? AND kind='user' ORDER BY seq LIMIT 1",
                               (sid,)).fetchone()
        return unpack(row[0] if row else "")

    def session(self, sid):
        """A session's row (session_dict) by its row id, or None."""
        row = self.con.execute("SELECT %s FROM sessions WHERE id=?" % SESSION_COLUMNS, (sid,)).fetchone()
        return session_dict(row) if row else None

    def _sessions(self, where, params=()):
        return [session_dict(r) for r in self.con.execute(
            "SELECT %s FROM sessions WHERE %s ORDER BY modified DESC, chunk_count DESC" % (SESSION_COLUMNS, where), params)]

    def sessions_with_id(self, session_id):
        """The sessions with this id (several when files share it: see COPY_MARK), newest first."""
        return self._sessions("session_id = ?", (session_id,))

    def sessions_with_id_prefix(self, prefix):
        return self._sessions("session_id LIKE ? ESCAPE '\\'", (like_escape(prefix) + "%",))

    def sessions_in(self, paths):
        """The sessions read from these files (paths as Python opens them)."""
        return self._sessions("path IN (%s)" % ",".join("?" * len(paths)), [db_path(p) for p in paths])

    def named_sessions(self):
        """The sessions that have a name, newest first."""
        return self._sessions("name IS NOT NULL AND name != ''")

    def neighbour_ids(self, session_id):
        """The session ids just before and just after this one in sorted order (None at either end)."""
        return [self.con.execute("SELECT %s(session_id) FROM sessions WHERE session_id %s ?" % (agg, op),
                                 (session_id,)).fetchone()[0] for op, agg in (("<", "max"), (">", "min"))]

    def same_id_rows(self, session_id):
        """The row ids of the sessions with this id, in the order their COPY_MARK numbers them."""
        return [r for (r,) in self.con.execute("SELECT id FROM sessions WHERE session_id=? ORDER BY path, id",
                                               (session_id,))]

    def close(self):
        for con in (self.con, self._spare):
            try:
                if con is not None:
                    con.close()
            except sqlite3.Error:
                pass
        self._spare = None


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


SESSION_COLUMNS = "id, agent, session_id, path, cwd, name, created, modified, parent, chunk_count, summary, deleted"
SESSION_KEYS = [c.strip() for c in SESSION_COLUMNS.split(",")]


def session_dict(row):
    """A sessions row as a dict, its path printable (see shown_path)."""
    s = dict(zip(SESSION_KEYS, row))
    s["path"] = shown_path(s["path"])
    return s


class RankingQuery:
    """The query that ranks session parts for one search (Store.ranking hands it out; ranked_sessions
    runs it once per stage, with the stage's FTS5 expression): the best parts first by weighted
    BM25, with their session's agent and id, limited to the sessions the filters and the excluded
    words (-word) let through."""

    def __init__(self, store, filters, excluded=()):
        self.store = store
        where, params = self._conditions(filters)
        exclude = ""
        if excluded:
            exclude = (" AND d.session NOT IN (SELECT d2.session FROM docs_fts JOIN docs d2 ON d2.id = docs_fts.rowid "
                       "WHERE docs_fts MATCH ?)")
            params = params + [" OR ".join(excluded)]
        weights = ", ".join(str(DOC_WEIGHTS[c]) for c in DOC_COLUMNS)
        if where or exclude:
            self.sql = ("SELECT d.session, bm25(docs_fts, %s) AS score, d.first_seq, d.last_seq, s.agent, s.session_id, d.id, "
                        "s.path FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid JOIN sessions s ON s.id = d.session "
                        "WHERE docs_fts MATCH ?%s%s ORDER BY score, d.id LIMIT ?") % (weights, where, exclude)
        else:  # nothing to filter on: the joins are made for the rows kept only (10-20% of a stage at 1 GB)
            self.sql = ("SELECT d.session, f.score, d.first_seq, d.last_seq, s.agent, s.session_id, d.id, s.path FROM "
                        "(SELECT rowid, bm25(docs_fts, %s) AS score FROM docs_fts WHERE docs_fts MATCH ? "
                        "ORDER BY score, rowid LIMIT ?) f JOIN docs d ON d.id = f.rowid JOIN sessions s ON s.id = d.session "
                        "ORDER BY f.score, d.id") % weights
        self.params = params

    @staticmethod
    def _conditions(filters):
        """WHERE conditions on sessions `s` for the Filters, and their parameters."""
        cond, params = [], []
        if filters.agent:
            cond.append("s.agent = ?")
            params.append(filters.agent)
        if filters.windows:   # LIKE ignores (ASCII) case; a stored cwd's slashes read as backslashes
            below = filters.cwd.rstrip("\\") + "\\"
            cond.append("(replace(s.cwd, '/', '\\') LIKE ? ESCAPE '\\' OR replace(s.cwd, '/', '\\') LIKE ? ESCAPE '\\')")
            params += [like_escape(filters.cwd), like_escape(below) + "%"]
        elif filters.cwd:
            below = filters.cwd.rstrip(os.sep) + os.sep
            if filters.fold_case:  # LIKE ignores (ASCII) case: the folder and everything below it alike
                cond.append("(s.cwd LIKE ? ESCAPE '\\' OR s.cwd LIKE ? ESCAPE '\\')")
                params += [like_escape(filters.cwd), like_escape(below) + "%"]
            else:
                cond.append("(s.cwd = ? OR substr(s.cwd, 1, ?) = ?)")
                params += [filters.cwd, len(below), below]
        if filters.after:
            cond.append("s.modified >= ?")
            params.append(filters.after)
        if filters.before:
            cond.append("s.modified < ?")
            params.append(filters.before)
        if filters.tool:
            cond.append("EXISTS(SELECT 1 FROM touched t WHERE t.session = s.id AND lower(t.tool) IN (%s))"
                        % ",".join("?" * len(filters.tool)))
            params += filters.tool
        if filters.path:
            cond.append("EXISTS(SELECT 1 FROM touched t WHERE t.session = s.id AND t.path LIKE ? ESCAPE '\\')")
            params.append("%" + like_escape(filters.path) + "%")
        if filters.host:   # a remote's mirror, or outside every mirror (host_filter)
            cond.append("(substr(s.path, 1, ?) %s ?)" % ("=" if filters.host[1] else "IS NOT"))
            params += [len(filters.host[0]), filters.host[0]]
        return (" AND " + " AND ".join(cond)) if cond else "", params

    def rows(self, expr, limit, deadline):
        """(session row id, bm25 score, first seq, last seq, agent, session id, part id, file path) of the best
        `limit` parts matching the FTS5 expression; OperationalError "interrupted" once the
        time.monotonic() `deadline` has passed."""
        con = self.store.con
        con.set_progress_handler(lambda: time.monotonic() > deadline, 20000)
        try:
            return con.execute(self.sql, [expr] + self.params + [limit]).fetchall()
        finally:
            con.set_progress_handler(None, 0)

    def prefetch(self, expr, limit):
        """rows(expr, limit) fetched on a second connection, in a thread, while the caller goes on."""
        return _Prefetch(self.store.path, self.sql, [expr] + self.params, limit, self.store.spare())


STAGE_SECONDS = 0.4  # a stage query running longer is given up (the next, looser stage goes on)


class _Prefetch:
    """The rows of one ranking query, fetched on a second connection in a thread while the caller
    runs another: SQLite lets go of the GIL while it works, so a second core does it meanwhile.
    (_thread, not threading: importing threading costs ~1 ms, as much as this saves at times. No
    progress handler on that connection: a Python callback in the thread would contend for the GIL;
    the caller interrupts it instead.)"""

    def __init__(self, path, sql, params, limit, con=None):
        import _thread
        self.limit, self.rows, self.own = limit, None, con is None   # `con`: a kept one (Store.spare)
        self.con = con or sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        self.done = _thread.allocate_lock()
        self.done.acquire()
        _thread.start_new_thread(self._fetch, (sql, params + [limit]))

    def _fetch(self, sql, params):
        try:
            self.rows = self.con.execute(sql, params).fetchall()
        except sqlite3.Error:
            pass  # (interrupted, or anything else: the caller runs the query itself)
        finally:
            self.done.release()

    def take(self, limit):
        """What the query gives with LIMIT `limit` (rows are in one total order, so a shorter
        LIMIT is a prefix), or None when it must run anew. Like a stage the caller runs, it is
        given up (OperationalError "interrupted") when it has not finished within STAGE_SECONDS."""
        if not self.done.acquire(timeout=STAGE_SECONDS):
            self.close()
            raise sqlite3.OperationalError("interrupted")
        self.done.release()
        if self.rows is None or (limit > self.limit and len(self.rows) >= self.limit):
            return None
        return self.rows[:limit]

    def close(self):
        if self.con is not None:
            if not self.done.acquire(False):   # still running: stopped (an interrupt of an idle
                self.con.interrupt()           # connection is forgotten by its next statement)
                self.done.acquire()
            self.done.release()
            if self.own:
                self.con.close()
            self.con = None


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


# ==================================================================================================
# Indexer: discover files, decide what changed, parse, write in transactions
# ==================================================================================================


def label_text(s):
    """What the `name` column of every part of a session holds: its name and other labels."""
    return "\n".join(t for t in [s.name, s.summary] + list(s.labels) if t)


def clean_text(value):
    """Text SQLite can store: a lone surrogate (an emoji an agent cut in half, written as "\\ud83d"
    in JSON) becomes U+FFFD instead of failing the whole write."""
    if not isinstance(value, str) or value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


# A session's row in `sessions` as Prepared carries it (labels: name, tags... indexed with every part).
SessionMeta = collections.namedtuple("SessionMeta", "agent session_id path cwd name created modified parent summary labels")


class Prepared:
    """A parsed session made ready to write: plain values only (cheap to send from a worker), the
    chunk text compressed, and its parts already cut when it starts at chunk 0."""

    __slots__ = ("meta", "rows", "touched", "parts", "complete", "count", "words")

    def __init__(self, s, fresh, redact_secrets=True):
        for c in s.chunks:
            # Session.add caps a message at CHUNK_CAP; a chunk grown after it (streamed fragments
            # joined by Chunk.extend, a tool call's text set once its output came) is capped here,
            # so that no stored chunk is longer, whatever the parser did.
            text = c.text if len(c.text) <= CAPPED_CHUNK else cap_text(c.text, CHUNK_CAP)
            c.text = clean_text(text)
        if redact_secrets:
            shapes, held = secret_hints(c.text for c in s.chunks)
            for k in held:
                s.chunks[k].text = redact(s.chunks[k].text, shapes)[0]
        for attr in ("session_id", "cwd", "name", "parent", "summary"):
            v = getattr(s, attr)
            if v is not None and not isinstance(v, str):   # a record's number (or object) where text was
                v = str(v) if attr == "session_id" or isinstance(v, (int, float)) and not isinstance(v, bool) else None
            setattr(s, attr, clean_text(v))
        s.labels = [clean_text(t) for t in s.labels if isinstance(t, str)]
        if redact_secrets:  # a name, summary or folder can hold a secret as well as the text
            s.cwd, s.name, s.summary = (redact(v)[0] if isinstance(v, str) else v for v in (s.cwd, s.name, s.summary))
            s.labels = [redact(t)[0] for t in s.labels]
        self.meta = SessionMeta(s.agent, s.session_id, s.path, s.cwd, s.name, s.created, s.modified, s.parent,
                                s.summary, label_text(s))
        self.rows = [(c.kind, c.role, c.tool, c.path, c.ts, pack(c.text)) for c in s.chunks]
        self.touched = sorted({(c.tool or "", c.path or "") for c in s.chunks if c.kind == "tool"})
        self.parts = None
        if fresh:
            self.parts = [(f, l, doc_columns(self.meta.labels, p))
                          for f, l, p in cut_parts((i, c.kind, c.text) for i, c in enumerate(s.chunks))]
        self.complete = s.complete
        self.count = len(s.chunks)
        # The words people and the assistant used, for spelling corrections (see near_words).
        # (in no order: the writer adds them to its batch's set, written sorted at commit)
        self.words = list(vocabulary([label_text(s)] + [c.text for c in s.chunks if KIND_COLUMN.get(c.kind) == "talk"]))

    def __getstate__(self):
        return [getattr(self, k) for k in self.__slots__]

    def __setstate__(self, state):
        for k, v in zip(self.__slots__, state):
            setattr(self, k, v)


class IndexSummary:
    """What one index run did; printed as one line, or as JSON with --json.

    Every file seen (listed under a source and not excluded) is counted once: indexed, unchanged or
    not indexed (not a session file, unreadable, damaged, cannot be stat'ed), so that these three
    add up to `seen`. Removed files are the indexed ones no longer seen; folders that cannot be
    listed are reported with the files not indexed, but are not files."""

    def __init__(self):
        self.seen = self.indexed = self.unchanged = self.removed = 0
        self.not_indexed = self.folders_unread = 0
        self.chunks_kept = 0  # chunks a damaged file no longer gives, kept as indexed before (see keep_lost_chunks)
        self.deferred = 0     # files an earlier version indexed, left for later searches (see REREAD_BYTES)
        self.sessions = self.chunks = self.skipped_lines = 0
        self.problems = []   # {"path", "reason"}: files not indexed (not a session file, unreadable, ...)
        self.seconds = 0.0
        self.merged, self.merge_seconds = False, 0.0   # the full-text index's dead entries merged out (merge_index)

    def problem(self, path, reason, folder=False):
        self.problems.append({"path": shown_path(path), "reason": reason})
        if folder:
            self.folders_unread += 1
        else:
            self.not_indexed += 1

    def as_json(self):
        return {"filesSeen": self.seen, "filesIndexed": self.indexed, "filesUnchanged": self.unchanged,
                "filesRemoved": self.removed, "filesSkipped": self.not_indexed, "foldersSkipped": self.folders_unread,
                "sessions": self.sessions, "chunks": self.chunks, "linesSkipped": self.skipped_lines,
                "chunksKept": self.chunks_kept, "seconds": round(self.seconds, 3), "merged": self.merged,
                "skipped": self.problems}

    def line(self):
        return ("indexed: %d %s seen, %d indexed, %d unchanged, %d removed, %d not indexed; "
                "%d %s, %d %s; %d %s skipped; %.2fs"
                % (self.seen, _plural(self.seen, "file"), self.indexed, self.unchanged, self.removed, self.not_indexed,
                   self.sessions, _plural(self.sessions, "session"), self.chunks, _plural(self.chunks, "chunk"),
                   self.skipped_lines, _plural(self.skipped_lines, "line"), self.seconds)
                + ("; %d %s not read" % (self.folders_unread, _plural(self.folders_unread, "folder"))
                   if self.folders_unread else "")
                + ("; %d %s lost from damaged files kept as indexed" % (self.chunks_kept, _plural(self.chunks_kept, "chunk"))
                   if self.chunks_kept else "")
                + ("; replaced text merged out of the full-text index (%.2fs)" % self.merge_seconds if self.merged else ""))


class FileStat:
    """The two fields of os.stat_result the indexer compares."""

    __slots__ = ("st_size", "st_mtime_ns")

    def __init__(self, size, mtime_ns):
        self.st_size, self.st_mtime_ns = size, mtime_ns


# One file to read: where, with which parser, its stat now, its row (None when new), and the source
# it was found under; `resume` is the checkpoint to go on from when the file only grew.
Job = collections.namedtuple("Job", "path parser stat row source resume")

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3", ".vscdb")


def stat_file(path, parser, st=None):
    """A session file's size and time, with what changes along with it folded in: the parser's
    sidecar files (pi's session metadata) and an SQLite store's write-ahead log, where a running
    agent's newest rows stay until a checkpoint copies them into the store itself. `st`: the file's
    own os.stat, when the caller has it. (Anything with st_size and st_mtime_ns is returned.)"""
    st = st or os.stat(path)
    extra = parser.sidecars(path) if type(parser).sidecars is not Parser.sidecars else []
    if path.endswith(SQLITE_SUFFIXES):
        extra = list(dict.fromkeys(list(extra) + [path + "-wal"]))
    if not extra:
        return st
    size, mtime = st.st_size, st.st_mtime_ns
    for p in extra:
        try:
            x = os.stat(p)
        except OSError:
            continue
        mtime = max(mtime, x.st_mtime_ns)
        if p.endswith("-wal"):
            size += x.st_size
    return FileStat(size, mtime)


def _version_alone(parser, row_parser, status, size, mtime_ns, st):
    """Whether an indexed file that differs from the disk (see _changed) differs by its parser's
    version alone: read by this parser, fine, and the same size and time (see REREAD_BYTES)."""
    return row_parser == parser.id and status == "ok" and size == st.st_size and mtime_ns == st.st_mtime_ns


def _changed(row, parser, st):
    return (row.parser != parser.id or row.parser_version != parser.version or row.size != st.st_size
            or row.mtime_ns != st.st_mtime_ns or row.status == "deleted")


def list_source(src, summary):
    """(paths, Listing) of one source; paths is None when the source cannot be listed at all."""
    with Listing() as log:
        try:
            # A configured file is read as it is, whatever its name: the user said what it is.
            paths = [src.path] if os.path.isfile(src.path) else src.parser.list_files(src.path)
        except OSError as e:
            summary.problem(src.path, "cannot list: %s" % (e.strerror or e), folder=True)
            paths = None
    for folder, why in log.unreadable:
        summary.problem(folder, "cannot list folder: %s" % why, folder=True)
    return paths, log


def _inside(path, folders):
    return any(path.startswith(f + os.sep) for f in folders)


# A file belongs to the source that listed it first: its row records that source's root (`source`)
# and parser. Both are needed to tell sources apart, since several sources may share a root (the
# README's aider + crush on ~/code) or nest: a listing of one source says nothing about another's
# files, and a file is checked with its own parser.
def _owner(src):
    return (src.path, src.parser.id)


def _add_listing(listings, src, dirs):
    """Record the folders a source was listed from. `dirs` rows are kept per root, so sources that
    share a root share its folder records: their listings are merged (a folder's older time wins,
    so that a folder changed between the two listings is listed again next time)."""
    merged = dict(listings.get(src.path, ()))
    for folder, mtime in dirs:
        merged[folder] = min(mtime, merged.get(folder, mtime))
    listings[src.path] = sorted(merged.items())


# -- Freshness: which files a refresh looks at --------------------------------------------------
#
# `sesame index` and `watch` compare every session file's size and time with the index (a stat
# each). A search must not: that cost would grow with the user's history forever. Before a search
# (and show) the index is refreshed from what is cheap and exact every time, plus a bounded share
# of the rest:
#   - the folders each source was listed from: a file created, removed or renamed in a folder
#     changes the folder's time, so a changed folder means that source is listed again (new and
#     removed sessions are seen at once) and every file in that folder is checked. The folders of
#     one session's own (Parser.session_folders: Claude Code's <project>/<session>/subagents/)
#     change only while that session's file is written: they are compared with that file, when a
#     rule below compares it, and otherwise a slice at a time (1 in FOLDER_SHARE by the second), so
#     that a file put there by something else (a restore) is found within FOLDER_SHARE searches;
#     folders named by a past day (Parser.dated_folders: Codex's YYYY/MM/DD), quiet since
#     ACTIVE_SECONDS or named two days back or more, get no file from their agent either: a slice
#     at a time too;
#   - the files written in the last ACTIVE_SECONDS (agents append to the sessions they run), the
#     ACTIVE_MAX_FILES newest of them: a history copied or restored (every file dated now) or a day
#     of thousands of sub-agent files would otherwise be compared file by file on every search for
#     two days; a file an agent is writing was indexed last, so it is among the newest, and the
#     older ones are left to the journals, the caller's folder and the sweep; the
#     files holding several sessions (agent databases: few, and any session may change in them), and
#     the files of sessions run in the caller's folder or above it (a resumed old session: agents
#     resume sessions of the folder they run in, and people and agents search from there);
#   - the files of the sessions the agents' change journals named since the last refresh (a
#     session resumed after months, from any folder: see read_journals); for an agent that keeps
#     none but marks its starts (pi, Gemini CLI, Qwen Code), every file of its source while a start
#     is not yet followed by a write to a quiet file; for one that keeps a prompt history per
#     project (kimi-cli), the files of the projects whose history grew;
#   - the rest in turn: each search checks at least SWEEP_MIN_FILES more files (as many as fit in
#     SWEEP_SECONDS), going on from where the last search stopped, so that an old file changed by
#     something else is seen within ceil(files / SWEEP_MIN_FILES) searches.
# Anything that makes these records untrustworthy (first use, other sources, another parser version,
# changed exclude/redact settings) makes the refresh check everything, as `sesame index` does.
ACTIVE_SECONDS = 2 * 24 * 3600
ACTIVE_MAX_FILES = 200
FOLDER_SHARE = 16
SESSION_DIRS = "\x00sessions"   # (the key suffix of the folders of one session's own: see Store.set_listings)
SWEEP_MIN_FILES = 200
SWEEP_SECONDS = 0.0015
CWD_MAX_FILES = 1000
# A new Sesame whose parser for an agent reads its files differently (a new Parser.version) reads
# them again. A search reads at most REREAD_BYTES of those that changed in nothing else, the latest
# first, and answers from the index as it is for the rest, which keep their older text meanwhile:
# read all at once, the first search after an upgrade took over a minute at 1 GB, silently (and an
# MCP call timed out). `sesame index`, `watch` and the MCP server's background refresh read them all
# (an MCP call reads none: the background refresh does, as it does the sweep).
REREAD_BYTES = 4 * 2 ** 20
REREAD_ROWS = 200


class Plan:
    """What a look at the disk found: the files to read, the files gone, and what to remember."""

    def __init__(self, full):
        self.full = full
        self.todo = []        # Jobs without their resume point (found when writing)
        self.gone = []        # FileRows of files no longer listed
        self.listings = {}    # source path -> [(folder, mtime_ns)]: sources listed again
        self.sweep = None     # where the next search's sweep starts (a file id)
        self.moved = []       # (source, path) of unchanged files now listed first by another source
        self.journals = None  # where each change journal was read up to, when that moved
        self.journal_places = {}  # the same, moved or not (a start mark's window may close later)
        self.checked = 0      # files whose size and time were compared
        self.budget = None    # bytes left for files stale by their parser's version only (None: all)
        self.deferred = 0     # such files left for later (see REREAD_BYTES)
        self.reread = None    # whether such files are left, when that changed (stored in meta)

    def __bool__(self):
        return bool(self.todo or self.gone or self.listings or self.moved or self.reread is not None)

    def defer(self, size):
        """Whether a file stale by its parser's version alone waits for a later run: once this plan's
        budget for them is spent (else its size is taken from the budget)."""
        if self.budget is None:
            return False
        if self.budget <= 0:
            self.deferred += 1
            return True
        self.budget -= max(size, 0)
        return False

    def note_reread(self, store, maybe_more=False):
        """Record whether files stale by their parser's version are left (for the next searches)."""
        left = self.deferred > 0 or maybe_more
        if left != (store.meta("reread") == "1"):
            self.reread = left


def parser_versions():
    """{parser id: version} of this Sesame's parsers (what a file was indexed with is in its row)."""
    return {p.id: p.version for p in PARSERS.values()}


def sources_key(sources):
    """What the freshness records were made for: changing it makes the next refresh check everything."""
    return json.dumps({"sources": [[s.parser.id, s.path] for s in sources],
                       "parsers": parser_versions()}, sort_keys=True)


def plan_full(store, sources, summary, policy, budget=None):
    """Compare every file of every source with the index (first source wins a file listed twice).
    Written for speed: `sesame index` and `watch` run it over every file, every time. `budget`: the
    bytes of files stale by their parser's version alone to read (None: all; see REREAD_BYTES)."""
    plan = Plan(full=True)
    plan.budget, reread = budget, []
    # Of every indexed file, only what the comparison needs, as plain tuples; whole rows (FileRows)
    # are read for the files to read or gone: 10,000 whole rows, or named tuples made of them, cost
    # a third of a no-op run.
    known = store.file_stats()
    known_dirs = store.listings()
    seen, kept, listed_sources, todo, listings = set(), set(), set(), [], {}
    guard = _lending()
    for src in sources:
        if guard:
            guard.pause()
        paths, log = list_source(src, summary)
        if paths is None:
            continue  # its files are neither read nor gone: whatever was indexed from them stays
        listed_sources.add(_owner(src))
        _add_listing(listings, src, log.dirs)
        unreadable = [d for d, _ in log.unreadable]
        if unreadable:
            kept.update(key for key in store.source_paths(*_owner(src)) if _inside(fs_path(key), unreadable))
        parser = src.parser
        pid, version = parser.id, parser.version
        # A parser without sidecar files: a stat says all (except for SQLite stores). pi's answers []
        # at once for a folder without sessions-meta beside it.
        sidecars = None if type(parser).sidecars is Parser.sidecars else parser.sidecars
        excludes = policy.excludes_path if policy.exclude else None
        stat, get, add, checked = os.stat, known.get, seen.add, 0
        for path in paths:
            if guard and not checked % LEND_FILES:
                guard.pause()
            key = path if path.isascii() else db_path(path)
            if key in seen or (excludes and excludes(path)):
                continue  # an excluded file counts as gone: what was indexed from it is removed
            add(key)
            try:
                st = stat(path)
                if (sidecars and sidecars(path)) or path.endswith(SQLITE_SUFFIXES):
                    st = stat_file(path, parser, st)
            except OSError as e:
                summary.problem(path, "cannot stat: %s" % (e.strerror or e))
                kept.add(key)
                continue
            checked += 1
            row = get(key)  # (parser, parser_version, size, mtime_ns, status, source)
            if (row is None or row[3] != st.st_mtime_ns or row[2] != st.st_size or row[1] != version
                    or row[0] != pid or row[4] == "deleted"):
                job = (path, parser, FileStat(st.st_size, st.st_mtime_ns), key, src.path)
                if budget is not None and row is not None and _version_alone(parser, row[0], row[4], row[2], row[3], st):
                    reread.append((st.st_mtime_ns, job, row[5]))   # stale by the parser's version alone
                else:
                    todo.append(job)
            elif row[5] != src.path:  # the source that listed it first is another now (the config changed)
                plan.moved.append((src.path, key))
        plan.checked += checked
    for _, job, source in sorted(reread, key=lambda r: r[0], reverse=True):  # the latest first
        if not plan.defer(job[2].st_size):
            todo.append(job)
        elif source != job[4]:
            plan.moved.append((job[4], job[3]))
    plan.note_reread(store)
    plan.listings = {root: dirs for root, dirs in listings.items() if dirs != known_dirs.get(root, [])}
    configured = {_owner(s) for s in sources}
    gone = [key for key, row in known.items() if key not in seen and key not in kept and row[4] != "deleted"]
    # Whole rows are read now, not from `known`: a run that lent its turn (_RunGuard) may find a file
    # new, or not yet gone, that the search it let run has indexed or marked gone meanwhile.
    rows = {row.path: row for row in store.file_rows_at([job[3] for job in todo] + gone)}
    plan.todo = [Job(path, parser, st, rows.get(key), source, None) for path, parser, st, key, source in todo]
    plan.gone = [rows[key] for key in gone if key in rows and rows[key].status != "deleted"
                 and ((rows[key].source, rows[key].parser) in listed_sources
                      or (rows[key].source, rows[key].parser) not in configured)]
    return plan


_DAY_FOLDER_RE = LazyPattern(r"[\\/][0-9]{4}[\\/][0-9]{2}[\\/][0-9]{2}$")  # .../YYYY/MM/DD (Parser.dated_folders)


def _in_changed(path, changed_dirs, levels):
    """Whether a file's folder, or one of the `levels` folders above it, is among changed_dirs."""
    folder = os.path.dirname(path)
    for _ in range(levels + 1):
        if folder in changed_dirs:
            return True
        folder = os.path.dirname(folder)
    return False


def plan_quick(store, sources, summary, policy, cwd=None, sweep=True):
    """The freshness rules above: folders, active files, the caller's folder, the journals, then a
    sweep (unless `sweep` is false: the MCP server compares every file in the background)."""
    plan = Plan(full=False)
    known_dirs = store.listings([src.path for src in sources])
    # Files written lately, files holding several sessions, the caller's folder and the journals'
    # sessions first: the folders of one session's own are compared when its file is.
    check = {}
    since = time.time_ns() - ACTIVE_SECONDS * 10 ** 9
    for row in store.active_file_rows(since, ACTIVE_MAX_FILES):
        check[row.id] = row
    for row in store.shared_file_rows():
        check[row.id] = row
    for row in store.pending_file_rows():  # read in part, or marked to be read again
        check[row.id] = row
    for row in _cwd_rows(store, cwd):
        check[row.id] = row
    plan.budget, outdated, left = REREAD_BYTES if sweep else 0, [], store.meta("reread") == "1"
    if left:  # files an earlier version indexed, left for later searches
        outdated = store.version_stale_rows(parser_versions(), REREAD_ROWS)
        for row in outdated:
            check.setdefault(row.id, row)
    named, started, projects = read_journals(store, sources, plan)
    for row in _journal_rows(store, named):
        check[row.id] = row
    for src, folder in projects:
        for row in store.file_rows_under(*_owner(src), folder):
            check[row.id] = row
    changed_dirs = set()
    share = time.time_ns() // 10 ** 9 % FOLDER_SHARE
    # A day folder named before this (by the local date, as Codex names them; two days back, so that
    # another time zone's, a remote's, is not taken for past too soon) is a past day's by its name.
    past_days = time.strftime("/%Y/%m/%d", time.localtime(since / 10 ** 9))
    for src in sources:
        dirs = known_dirs.get(src.path)
        stale = not dirs  # a configured file, or a source not listed yet: listed every time (cheap)
        if dirs and src.parser.session_folders:
            dirs = dirs + _session_folders(store, src, check.values())
        for k, folder_mtime in enumerate(dirs or ()):
            folder, mtime = folder_mtime
            if src.parser.dated_folders and mtime > 0 and k % FOLDER_SHARE != share:
                # A past day's folder, quiet since or named so (a history restored or copied: every
                # folder's time is recent for two days, and ~1,000 of them cost each search 2.5 ms):
                # one slice of them per search (0: its time was not settled when it was listed).
                day = _DAY_FOLDER_RE.search(folder)
                if day and (mtime < since or day.group().replace("\\", "/") < past_days):
                    continue
            try:
                now = os.stat(folder).st_mtime_ns
            except OSError:
                now = None
            if now != mtime:
                changed_dirs.add(folder)
                stale = True
        if not stale:
            continue
        paths, log = list_source(src, summary)
        if paths is None:
            continue
        if dirs or log.dirs:
            _add_listing(plan.listings, src, log.dirs)
        rows = {row.path: row for row in store.file_rows_of(*_owner(src))}
        listed = set()
        for path in paths:
            key = path if path.isascii() else db_path(path)
            if policy.excludes_path(path):
                continue
            listed.add(key)
            row = rows.get(key)
            if row is None:
                other = store.file_row(key)
                if other and other.status != "deleted":
                    continue  # another source has it (first source wins)
                try:
                    plan.todo.append(Job(path, src.parser, stat_file(path, src.parser), other, src.path, None))
                    plan.checked += 1
                except OSError as e:
                    summary.problem(path, "cannot stat: %s" % (e.strerror or e))
            elif not dirs or row.status == "deleted" or _in_changed(path, changed_dirs, src.parser.folder_levels):
                check[row.id] = row
        unreadable = [d for d, _ in log.unreadable]
        plan.gone += [row for key, row in rows.items() if key not in listed and row.status != "deleted"
                      and not _inside(fs_path(key), unreadable)]
    parsers = {_owner(src): src.parser for src in sources}
    gone = {row.id for row in plan.gone}
    for row in check.values():
        if row.id not in gone:
            _check_row(plan, row, parsers, summary)
    compared = set(check) | gone
    for src, mark, opened in started:
        compared |= _check_started(store, plan, src, mark, opened, summary, skip=compared)
    if sweep:
        _sweep(store, plan, parsers, summary, skip=compared)
    plan.gone = list({row.id: row for row in plan.gone}.values())
    if left or plan.deferred:
        plan.note_reread(store, maybe_more=len(outdated) == REREAD_ROWS)
    return plan


def _session_folders(store, src, rows):
    """The folders of a source whose sessions have folders of their own (Parser.session_folders:
    <source>/<project>/<session>/...) that a search compares: those of the sessions whose files it
    compares (`rows`), and one slice in FOLDER_SHARE of all of them, by the second."""
    if not store.session_folder_count(src.path):
        return []   # (none known: a new one changes its project folder's time, which is compared)
    root = src.path.rstrip(os.sep) + os.sep
    owners = set()
    for row in rows:
        path = fs_path(row.path)
        if row.source == src.path and path.startswith(root):
            parts = path[len(root):].split(os.sep, 2)
            if len(parts) >= 2:   # <project>/<session>.<ext> or <project>/<session>/.../<file>
                session = os.path.splitext(parts[1])[0] if len(parts) == 2 else parts[1]
                owners.add(root + parts[0] + os.sep + session)
    out = []
    if len(owners) <= 64:
        for folder in sorted(owners):
            out += store.session_folders(src.path, folder)
    else:   # (a search from a project of hundreds of sessions: one read of them all, then the owners')
        cut = len(root)
        for folder, mtime in store.session_folders(src.path, src.path.rstrip(os.sep), below_only=True):
            parts = folder[cut:].split(os.sep, 2)
            if len(parts) >= 2 and root + parts[0] + os.sep + parts[1] in owners:
                out.append((folder, mtime))
    return out + store.session_folders_share(src.path, time.time_ns() // 10 ** 9 % FOLDER_SHARE, FOLDER_SHARE)


def _cwd_rows(store, cwd):
    """The files of sessions run in `cwd` or a folder above it (not / or the home folder itself)."""
    if not cwd:
        return []
    folders, d = [], cwd.rstrip(os.sep)
    home = os.path.expanduser("~").rstrip(os.sep)
    while d and d != home and len(folders) < 32:
        folders.append(d)
        d = os.path.dirname(d)
        if d == folders[-1]:
            break
    if not folders:
        return []
    return store.cwd_file_rows(folders, CWD_MAX_FILES)


# Change journals. Claude Code and Codex append a line naming the session to a history file of
# their own on every prompt (Parser.journal), in whatever folder the session runs: a session resumed
# after months in project A is named there before the user searches from project B. Each refresh
# reads what the journals gained since the last one (a few hundred bytes; a stat when nothing did)
# and checks the files of the sessions they name. Where each journal was read up to is kept beside
# the index (like the sweep's place: a search writes nothing to the index when nothing changed),
# with the journal's device and inode: a journal read for the first time, replaced or shorter than
# before (Codex trims its history from the front) is read again, from its last JOURNAL_MAX_BYTES
# only, as is a tail grown longer than that: the newest prompts name the sessions that matter.
JOURNAL_MAX_BYTES = 64 * 1024


def _journals_file(store):
    return os.path.join(os.path.dirname(store.path), "journals")


#
# An agent that keeps no journal may still mark its starts (Parser.start_mark: pi's agent folder,
# ~/.gemini and ~/.qwen/debug change their times whenever the agent starts). A start opens a window: until a file of
# that source that had been quiet (unchanged for START_QUIET_SECONDS before the start, or new) is
# seen written after it, each search compares every file of the source (a stat each: ~20 ms for
# 15,000 files, paid only between a start and its first prompt, usually seconds), at most
# START_WINDOW_SECONDS. A file written all along by another instance of the agent does not close
# it. On a slow disk (or a huge history) a search stops comparing after START_PASS_SECONDS and the
# next one goes on from there.
START_WINDOW_SECONDS = 3600
START_QUIET_SECONDS = 120
START_PASS_SECONDS = 0.1
START_SLACK_NS = 2 * 10 ** 9  # a file written this long before the mark counts as written after it
START_KEY = "start:"  # the start marks' records, among the journals' places
PROJECT_KEY = "project:"  # the per-project journals' sizes and times (Parser.project_journals), too
PROJECT_JOURNALS_MAX = 1000
RUNNING_KEY = "running:"  # a folder of running processes' files (Parser.running): its time, the ids named
RUNNING_MAX_FILES = 256
RUNNING_MAX_BYTES = 65536
UPDATES_KEY = "updates:"  # an agent's store that stamps sessions (Parser.updates): path, time, newest stamp
STAMPED_MAX = 1000   # sessions named by one read of such a store (a restored store stamps them all)


def read_journals(store, sources, plan):
    """({agent: {session id}}, [(source, mark folder, start time ns)], [(source, project folder)]):
    the sessions the change journals of the sources' agents named since the last refresh (and
    those their running processes name, or their stores stamped since: Parser.running, updates), the
    sources whose agent started (and has not written a quiet file since), and the project folders
    whose journal changed. Where each journal was read up to, each start mark's time and each
    project journal's size and time go to plan.journals when they moved (_save_journals)."""
    journals, marks, per_project, running, updates = {}, {}, [], {}, {}
    for src in sources:
        above = os.path.dirname(src.path.rstrip(os.sep))   # journal, running and updates lie beside the source
        for hook, found in ((src.parser.journal, journals), (src.parser.running, running),
                            (src.parser.updates, updates)):
            if hook:
                found.setdefault(os.path.join(above, hook[0]), (src.parser.id,) + tuple(hook[1:]))
        mark = src.parser.start_mark(src.path)
        if mark:
            marks.setdefault(mark, []).append(src)
        found = src.parser.project_journals(src.path)
        if found:
            per_project.append((src,) + found)
    if not journals and not marks and not per_project and not running and not updates:
        return {}, [], []
    try:
        with open_regular(_journals_file(store)) as f:
            known = json.loads(f.read())
    except (OSError,) + BAD_JSON:
        known = {}
    if not isinstance(known, dict):
        known = {}
    named, places, moved = collections.defaultdict(set), {}, False
    started, now = [], time.time_ns()
    for folder, srcs in marks.items():
        try:
            mtime = _mark_time(folder)
        except OSError:
            continue
        was = known.get(START_KEY + folder)
        valid = (isinstance(was, list) and len(was) == 3 and all(isinstance(v, int) for v in was[:2])
                 and isinstance(was[2], dict))
        # first seen: no window (what is indexed was read whole); a new time: the agent started then
        # ([the mark's time, the start's or 0, {source: the file id its comparing goes on from}])
        place = ((was if was[0] == mtime else [mtime, mtime, {}]) if valid else [mtime, 0, {}])
        if place[1] and now - place[1] > START_WINDOW_SECONDS * 10 ** 9:
            place = [mtime, 0, {}]
        places[START_KEY + folder] = place
        moved = moved or place != was
        started += [(src, folder, place[1]) for src in srcs if place[1]]
    for folder, (agent, key) in running.items():
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            continue
        was = known.get(RUNNING_KEY + folder)
        valid = isinstance(was, list) and len(was) == 2 and isinstance(was[1], list)
        ids = [i for i in was[1] if isinstance(i, str)] if valid else []
        if not valid or was[0] != mtime:   # a process started or ended: read again
            ids = _running_sessions(folder, key)
            moved = True
        places[RUNNING_KEY + folder] = [mtime, ids]
        named[agent].update(ids)
    for pattern, (agent, table, id_column, stamp_columns) in updates.items():
        db = _newest_store(pattern)
        try:
            mtime = _mark_time(db) if db else None
        except OSError:
            mtime = None
        if mtime is None:
            continue
        was, key = known.get(UPDATES_KEY + pattern), UPDATES_KEY + pattern
        # [the store, its time, the newest stamp read (None: none yet)]
        same = isinstance(was, list) and len(was) == 3 and was[0] == db
        since = was[2] if same and isinstance(was[2], (int, float)) and not isinstance(was[2], bool) else None
        if same and was[1] == mtime:
            places[key] = was
            continue
        try:
            found = _stamped_sessions(db, table, id_column, stamp_columns, since)
        except OSError:   # (busy now: read again by the next search)
            if same:
                places[key] = was
            continue
        # (damaged, or of another schema: read again once the store changes; first seen: no names,
        # only the newest stamp is remembered)
        ids, stamp = found if found is not None else ([], since)
        named[agent].update(ids)
        places[key] = [db, mtime, stamp]
        moved = True
    projects = []
    for src, folder, project_of in per_project:
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        seen = []
        for e in entries:
            target = project_of(e.name)
            try:
                st = e.stat(follow_symlinks=False) if target else None
            except OSError:
                continue
            if st is not None and stat.S_ISREG(st.st_mode):
                seen.append((st.st_mtime_ns, st.st_size, e.path, target))
        # (a folder of thousands: the newest PROJECT_JOURNALS_MAX are followed, the rest left to the sweep)
        for mtime, size, path, target in sorted(seen, reverse=True)[:PROJECT_JOURNALS_MAX]:
            key, now_at = PROJECT_KEY + path, [size, mtime]
            was, places[key] = known.get(key), now_at
            if was != now_at:
                moved = True
                if isinstance(was, list):  # (first seen: only remembered, like a new journal's end)
                    projects.append((src, target))
    for path, (agent, keys) in journals.items():
        try:
            st = os.stat(path)
        except OSError:
            continue  # no journal (an older release, history turned off): the other rules hold
        ident = [st.st_dev, st.st_ino]
        was = known.get(path)
        start = was[2] if isinstance(was, list) and len(was) == 3 and was[:2] == ident and was[2] <= st.st_size else None
        if start == st.st_size:
            places[path] = was
            continue
        begin = max(start or 0, st.st_size - JOURNAL_MAX_BYTES)
        try:
            with open_regular(path) as f:
                f.seek(begin)
                block = f.read(st.st_size - begin)
        except OSError:
            continue
        first = block.find(b"\n") + 1 if begin != start and begin > 0 else 0  # begun inside a line: skip it
        end = block.rfind(b"\n") + 1  # a line still being written is read next time, whole
        for raw in block[first:end].split(b"\n"):
            raw = raw.strip(LINE_START)
            if not raw.startswith(b"{"):
                continue
            try:
                rec = json.loads(raw)
            except BAD_JSON:
                continue
            for key in keys:
                if isinstance(rec, dict) and isinstance(rec.get(key), str) and rec[key]:
                    named[agent].add(rec[key])
                    break
        places[path] = ident + [begin + max(end, first)]
        moved = True
    plan.journal_places = places
    if moved:
        plan.journals = places
    return named, started, projects


def _running_sessions(folder, key):
    """The session ids the files of an agent's folder of running processes name (Parser.running)."""
    ids = set()
    try:
        with os.scandir(folder) as it:
            paths = sorted(e.path for e in it if e.name.endswith(".json"))
    except OSError:
        return []
    for path in paths[:RUNNING_MAX_FILES]:   # (a folder left full of files by crashed processes)
        try:
            with open_regular(path) as f:
                rec = json.loads(f.read(RUNNING_MAX_BYTES))
        except (OSError, UnicodeDecodeError) + BAD_JSON:
            continue
        if isinstance(rec, dict) and isinstance(rec.get(key), str) and rec[key]:
            ids.add(rec[key])
    return sorted(ids)


def _newest_store(pattern):
    """The file that `pattern` (a path whose name has one "*" for a version number) names with the
    highest number, or None (see Parser.updates)."""
    folder, name = os.path.split(pattern)
    before, after = name.split("*", 1)
    found = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                n = e.name
                if n.startswith(before) and n.endswith(after) and n[len(before):len(n) - len(after)].isdigit():
                    found.append((int(n[len(before):len(n) - len(after)]), e.path))
    except OSError:
        return None
    return max(found)[1] if found else None


def _stamped_sessions(db, table, id_column, stamp_columns, since):
    """([ids of the rows stamped at or after `since`: none when it is None], the newest stamp) from an
    agent's store (Parser.updates); None when it is not such a store or is damaged; OSError (EBUSY)
    when it is busy."""
    try:
        con = open_agent_db(db, attempts=1, timeout=0.05)   # (a search does not wait for a busy store)
    except NotASessionFile:
        return None
    except OSError as e:   # busy, or damaged (store_failure)
        if e.errno == errno.EBUSY:
            raise
        return None
    try:
        columns = {r[1] for r in con.execute('PRAGMA table_info("%s")' % table)}
        stamp_column = next((c for c in stamp_columns if c in columns), None)
        if stamp_column is None or id_column not in columns:
            return None
        newest = con.execute('SELECT max("%s") FROM "%s"' % (stamp_column, table)).fetchone()[0]
        ids = [] if since is None else [r[0] for r in con.execute(
            'SELECT "%s" FROM "%s" WHERE "%s" >= ? ORDER BY "%s" DESC LIMIT ?' % (id_column, table, stamp_column,
                                                                                  stamp_column), (since, STAMPED_MAX))]
    except (sqlite3.Error, UnicodeDecodeError) as e:
        failure = store_failure(e)
        if isinstance(failure, OSError) and failure.errno == errno.EBUSY:
            raise failure
        return None
    finally:
        con.close()
    if not isinstance(newest, (int, float)) or isinstance(newest, bool):
        newest = 0 if since is None else since   # (no row yet: every row stamped later is named)
    return [i for i in ids if isinstance(i, str) and i], newest


def _mark_time(path):
    """A start mark's time: an SQLite store's counts its write-ahead log's (where each commit goes
    while the agent keeps the store open)."""
    mtime = os.stat(path).st_mtime_ns
    if path.endswith(SQLITE_SUFFIXES):
        try:
            mtime = max(mtime, os.stat(path + "-wal").st_mtime_ns)
        except OSError:
            pass
    return mtime


def _check_started(store, plan, src, mark, opened, summary, skip):
    """Compare every file of a source whose agent started at `opened` (see read_journals); close
    the window when a file quiet before the start (or a new one) was written after it. Returns
    the ids of the files compared."""
    differ, compared = [], set()
    parser, place = src.parser, plan.journal_places[START_KEY + mark]
    rows = store.source_file_stats(*_owner(src))  # in id order
    was = place[2].pop(src.path, 0)  # the file to go on from
    at = bisect.bisect_left(rows, (was if isinstance(was, int) else 0, ))
    deadline, clock = time.monotonic() + START_PASS_SECONDS, time.monotonic
    for fid, path, size, mtime, version in rows[at:] + rows[:at]:
        if len(compared) >= SWEEP_MIN_FILES and clock() > deadline:
            place[2][src.path] = fid  # the rest next time
            break
        compared.add(fid)
        if _differs(path, parser, size, mtime, version):
            differ.append(fid)
    plan.checked += len(compared) - len(differ)
    if place[2].get(src.path, 0) != was:
        plan.journals = plan.journal_places
    parsers = {_owner(src): src.parser}
    for row in store.file_rows_by_id([fid for fid in differ if fid not in skip]):
        _check_row(plan, row, parsers, summary)
    # Read now, by this or another rule: a file new or quiet before the start, written after it (or
    # just before: Continue writes the session, then its list, the mark).
    quiet = opened - START_QUIET_SECONDS * 10 ** 9
    if any(job.source == src.path and job.parser is parser and job.stat.st_mtime_ns >= opened - START_SLACK_NS
           and (job.row is None or job.row.mtime_ns < quiet) for job in plan.todo):
        place[1:] = [0, {}]
        plan.journals = plan.journal_places
    return compared


def _journal_rows(store, named):
    """The indexed files holding the named sessions ({agent: {session id}})."""
    return [row for agent, ids in named.items() for row in store.session_file_rows(agent, ids)]


def _save_journals(store, plan):
    """Remember where each change journal was read up to (see read_journals)."""
    if plan.journals is None:
        return
    try:
        write_private(_journals_file(store), json.dumps(plan.journals))
    except OSError:
        pass


def _check_row(plan, row, parsers, summary):
    """Compare one indexed file with the disk; a changed one joins plan.todo, a vanished one plan.gone."""
    parser = parsers.get((row.source, row.parser)) or PARSERS.get(row.parser)
    if parser is None or row.status == "deleted":
        return
    path = fs_path(row.path)
    try:
        st = stat_file(path, parser)
    except FileNotFoundError:
        if (row.source, row.parser) in parsers:
            plan.gone.append(row)
        return
    except OSError as e:
        summary.problem(path, "cannot stat: %s" % (e.strerror or e))
        return
    plan.checked += 1
    if _changed(row, parser, st):
        if _version_alone(parser, row.parser, row.status, row.size, row.mtime_ns, st) and plan.defer(row.size):
            return  # stale by its parser's version alone, and this plan read its share of those
        plan.todo.append(Job(path, parser, st, row, row.source, None))


def _sweep_file(store):
    return os.path.join(os.path.dirname(store.path), "sweep")


def _differs(path, parser, size, mtime, version):
    """Whether an indexed file (its stored size, time and parser version) differs from the disk: one
    stat. A file gone or unreadable differs too (_check_row then tells which)."""
    try:
        st = stat_file(fs_path(path), parser)
    except OSError:
        return True
    return st.st_mtime_ns != mtime or st.st_size != size or version != parser.version


def _sweep(store, plan, parsers, summary, skip):
    """Check the next files in id order: at least SWEEP_MIN_FILES, more while SWEEP_SECONDS last.
    Every search runs this, so it is written for speed: of each file only what the comparison needs
    is read, as a plain tuple, and compared with one stat; the few that differ (or are gone) are
    then checked by _check_row from their whole row, like the files of the other rules."""
    try:
        with open_regular(_sweep_file(store)) as f:
            start = int(f.read().strip() or 0)
    except (OSError, ValueError):
        start = 0
    clock = time.monotonic
    deadline, done, differ = clock() + SWEEP_SECONDS, 0, []
    plan.sweep = start
    for fid, path, source, pid, version, size, mtime in store.files_after(start):
        plan.sweep = fid
        if fid in skip:
            continue
        parser = parsers.get((source, pid)) or PARSERS.get(pid)
        if parser is None:
            continue
        if pid != parser.id or _differs(path, parser, size, mtime, version):
            differ.append(fid)
        done += 1
        if done >= SWEEP_MIN_FILES and clock() > deadline:
            break
    plan.checked += done - len(differ)
    for row in store.file_rows_by_id(differ):
        _check_row(plan, row, parsers, summary)


def _save_sweep(store, plan):
    """Remember where the next sweep starts (a file of its own: a search writes nothing to the index
    when nothing changed, and may run where the index is read-only)."""
    if plan.sweep is None:
        return
    try:
        write_private(_sweep_file(store), "%d\n" % plan.sweep)
    except OSError:
        pass


BATCH_BYTES = 64 * 1024 * 1024   # commit after this much session data: bounded loss on interruption
BATCH_FILES = 2000
SLICE_BYTES = 8 * 1024 * 1024    # a resumable file is parsed this much at a time: bounded memory
PARALLEL_MIN_BYTES = 16 * 1024 * 1024  # below this much to read, a worker process costs more than it saves


class Batch:
    """One open write transaction, committed every BATCH_BYTES of input or BATCH_FILES files.

    Whatever is committed is consistent (files rows are written with their sessions), so an
    interrupted run loses at most the open batch, and the next run picks up from there.
    """

    def __init__(self, store, one_transaction=False):
        self.store, self.bytes, self.files = store, 0, 0
        self.one_transaction = one_transaction
        self.words = set()  # vocabulary seen in this batch, written once at commit
        store.begin()

    def done(self, nbytes, files=0):
        self.bytes += nbytes
        self.files += files
        if not self.one_transaction and (self.bytes >= BATCH_BYTES or self.files >= BATCH_FILES):
            self.commit()
            self.store.begin()

    def commit(self):
        if self.words:
            self.store.add_words(self.words)
            self.words = set()
        self.store.set_meta("last_index", iso(now_utc()))
        self.store.commit()
        self.bytes = self.files = 0

    def rollback(self):
        self.store.rollback()


def plan_index(store, sources, summary, policy, quick=False, cwd=None, sweep=True):
    """What to read and what is gone: every file compared (full), or by the freshness rules (quick),
    which only hold when the records were made for the same sources, parsers and settings."""
    if quick and store.meta("sources") == sources_key(sources) and store.meta("policy") == policy.fingerprint():
        return plan_quick(store, sources, summary, policy, cwd, sweep)
    return plan_full(store, sources, summary, policy, (REREAD_BYTES if sweep else 0) if quick else None)


def look_again(store, job):
    """A file to read (Job), looked at again because another indexer may have read it since it was
    planned: the job with the file's stat and whole row now, or None when the file is now as
    indexed (or gone: the next run says so)."""
    row = store.file_row(job.path if job.path.isascii() else db_path(job.path))
    try:
        st = stat_file(job.path, job.parser)
    except OSError:
        return None
    if row is not None and not _changed(row, job.parser, st):
        return None
    return job._replace(stat=st, row=row)


def recheck_plan(store, plan):
    """A plan a look made without the index lock, now carried out under it: meanwhile another
    indexer (a search's refresh) may have read its files or marked them gone. Each file to read is
    looked at again (stat and whole row) and left out when it is now as indexed; a file gone is left
    out when its row is gone or marked deleted already."""
    rows = {row.path: row for row in store.file_rows_at([row.path for row in plan.gone])}
    plan.todo = [job for job in (look_again(store, j) for j in plan.todo) if job is not None]
    plan.gone = [rows[r.path] for r in plan.gone if r.path in rows and rows[r.path].status != "deleted"]
    return plan


def run_index(store, sources, full=False, progress=None, policy=None, quick=False, cwd=None, sweep=True,
              look_only=False, merge_seconds=None, looked=None, planned=None):
    """Bring the index up to date with the sources. Files whose size and time are unchanged are not
    read; files that only grew are read from where the last run stopped; other changed files are
    read again; files gone keep their sessions, marked deleted (unless the policy says otherwise).
    `quick` looks at the disk by the freshness rules instead of file by file (see above).
    `look_only`: write nothing; the summary when there is nothing to do, else None, and then (the
    look's Plan, its summary) appended to `looked` (a list), if a plan was made. Given back as
    `planned` to a run under the index lock, that plan is carried out instead of making another
    (its files looked at again first: recheck_plan).
    `merge_seconds`: how long to merge a full-text index that holds many dead entries (None: until
    done, 0: not at all; see COMPACT_PAGES)."""
    t0 = time.monotonic()
    summary = planned[1] if planned else IndexSummary()
    policy = policy or Policy()
    lends = _RUN_GUARD.lends if _RUN_GUARD is not None else 0   # (see _lending_results)
    for parser in PARSERS.values():
        parser.new_run(os.path.dirname(store.path))
    known = store.meta("policy")
    if known is not None and known != policy.fingerprint():
        full = True  # `exclude` or `redact` changed: what is indexed must follow, everywhere
    plan = None
    if not full and known is not None:
        # The common case (every search starts with it): look without taking the write lock, and
        # leave at once when nothing changed. (Callers hold the index lock, so the plan stays true;
        # a plan made before, without it, is looked at again.)
        if planned:
            plan = recheck_plan(store, planned[0])
        else:
            plan = plan_index(store, sources, summary, policy, quick, cwd, sweep)
        _count(summary, plan)
        # Nothing to read, and the freshness records hold: leave. (After an upgrade that changed a
        # parser's version, a full look that finds nothing must still record the new sources key,
        # or every later search would look at every file again.)
        if not plan and not (plan.full and store.meta("sources") != sources_key(sources)):
            if not look_only:
                _save_sweep(store, plan)
                _save_journals(store, plan)
                if not quick:   # (a search merges only when it writes anyway: see COMPACT_SEARCH_SECONDS)
                    merge_index(store, summary, merge_seconds, progress)
            summary.seconds = time.monotonic() - t0
            return summary
    if look_only:
        if looked is not None and plan is not None:
            looked.append((plan, summary))
        return None
    if _RUN_GUARD is not None and _RUN_GUARD.lends != lends and store.meta("policy") != policy.fingerprint():
        return summary   # a search it let run rebuilt the index under a config edited since: this look is stale
    guard = _lending()
    if guard and (full or plan is None):
        # A rebuild is one transaction (searches see the old index until it commits), and a first
        # look runs inside the run's write transaction: no safe point to lend a turn at (_RunGuard).
        guard.lender, guard.pausable, guard = None, False, None
    batch = Batch(store, one_transaction=full)
    results = None
    try:
        if full:
            # Rebuilt in the run's one transaction: until it commits, searches see the old index, and
            # a rebuild that fails (full disk, Ctrl-C, kill -9) leaves the old index as it was.
            store.clear_index(policy)
        store.set_meta("policy", policy.fingerprint())
        if plan is None:
            plan = plan_full(store, sources, summary, policy)
            _count(summary, plan)
        store.set_meta("sources", sources_key(sources))
        if plan.reread is not None:
            store.set_meta("reread", "1" if plan.reread else "0")
        # A folder changed within the last seconds may change again within the same tick of a
        # coarse file system clock (1-2 s on some disks) without its time moving: such a folder is
        # recorded as unknown, so the next refresh lists it again.
        store.set_listings(plan.listings, settled=time.time_ns() - 2 * 10 ** 9,
                           session_roots={src.path for src in sources if src.parser.session_folders})
        store.move_files(plan.moved)
        for row in plan.gone:
            store.file_gone(row, keep=policy.keep_deleted)
            summary.removed += 1
        if guard:   # a background run lends its turn between files too (it parses in-process anyway)
            jobs = plan.todo
            to_read = sum(j.stat.st_size for j in jobs)
            results = pairs = _lending_results(guard, batch, jobs, policy, lends)
        else:
            jobs = [job._replace(resume=_resume_point(store, job)) for job in plan.todo]
            alone = [_time_alone(job) for job in jobs]
            read = [job for job, skip in zip(jobs, alone) if not skip]
            to_read = sum(j.stat.st_size - (j.resume.get("offset", 0) if j.resume else 0) for j in read)
            results = parse_all(read, parallel=to_read >= PARALLEL_MIN_BYTES, policy=policy)
            parsed = iter(results)
            pairs = ((job, None if skip else next(parsed)) for job, skip in zip(jobs, alone))
        done_bytes = 0
        for n, (job, result) in enumerate(pairs, 1):
            if result is None:   # its time alone moved: nothing to read (_time_alone)
                store.file_touched(job.row.id, job.stat.st_mtime_ns)
                summary.unchanged += 1
                continue
            index_file(batch, job, result, summary, policy)
            batch.done(0, files=1)
            done_bytes += job.stat.st_size
            if progress:
                progress(n, len(jobs), done_bytes, max(to_read, 1), time.monotonic() - t0)
        if plan.todo:  # rows of files gone whose sessions all moved to files indexed now
            store.drop_emptied_files()
        if store.meta("built") is None:
            store.set_meta("built", iso(now_utc()))  # a first complete index: searches stop waiting for it
        batch.commit()
    except BaseException:
        batch.rollback()
        raise
    finally:
        if results is not None:
            results.close()  # stops the worker processes, also when interrupted
    _save_sweep(store, plan)
    _save_journals(store, plan)
    merge_index(store, summary, merge_seconds, progress)
    summary.seconds = time.monotonic() - t0
    return summary


def merge_index(store, summary, seconds=None, progress=None, yield_to=None):
    """Merge the full-text index's segments when it holds many dead entries (see COMPACT_PAGES), a
    step (one transaction) at a time, for at most `seconds` (None: until done). On a terminal,
    `progress` (as run_index's) shows that it is at work.

    A background run lends its turn between steps (_RunGuard), and copies the log into the index
    (SQLite's checkpoint, which a commit makes every 1,000 pages written: 20 ms, up to 0.3 s, at 1
    GB) every few steps with its turn lent: a checkpoint needs neither the turn nor the write lock,
    and a call should not wait for it. `yield_to`: the index lock, not held by this run: between two
    steps it lets another indexer that holds it write first (COMPACT_YIELD_SECONDS)."""
    if seconds == 0 or not store.merge_due():
        return
    guard, t0 = _lending(), time.monotonic()
    done, steps = False, 0
    if guard:
        store.con.execute("PRAGMA wal_autocheckpoint=0")
    try:
        while not done:
            if guard and guard.waiting:
                guard.pause()
            if yield_to is not None:
                until = time.monotonic() + COMPACT_YIELD_SECONDS
                while time.monotonic() < until and yield_to.held_elsewhere():
                    time.sleep(0.005)
            with store.transaction():
                done = store.merge_step()
            steps += 1
            if guard and (done or steps % COMPACT_CHECKPOINT_STEPS == 0):
                guard.aside(store.checkpoint)
            if seconds is not None and time.monotonic() - t0 >= seconds:
                break
            if progress is not None and hasattr(progress, "merging") and steps % 64 == 1:
                progress.merging(time.monotonic() - t0)
    except sqlite3.OperationalError:
        return   # (a full disk: the run's own writes are committed; merging waits for a later run)
    finally:
        if guard:
            store.con.execute("PRAGMA wal_autocheckpoint=%d" % WAL_AUTOCHECKPOINT)
    summary.merge_seconds = time.monotonic() - t0
    summary.merged = done


def _lending_results(guard, batch, jobs, policy, lends):
    """(job, parse result) for each job of a run that lends its turn (_RunGuard): before each file,
    when a search waits, what is written so far is committed and the search runs. Once a search ran
    in this run's turn (guard.lends moved from `lends`, while it compared the files or since), it
    may have read some of the files left: each is then looked at again as _check_row would, and
    read on from where that search stopped, or not at all."""
    for job in jobs:
        if guard.waiting:
            batch.commit()
            guard.pause()
            batch.store.begin()
        if guard.lends != lends:
            job = look_again(batch.store, job)
            if job is None:
                continue
        job = job._replace(resume=_resume_point(batch.store, job))
        yield job, None if _time_alone(job) else parse_file(job.path, job.parser.id, job.resume, SLICE_BYTES, policy.redact)


def _count(summary, plan):
    # Files compared with the disk, and the files that could not be (a failed stat: listed, so seen,
    # and not indexed; the only problems a plan reports besides folders).
    summary.seen, summary.unchanged = plan.checked + summary.not_indexed, plan.checked - len(plan.todo)
    summary.deferred = plan.deferred


def file_checksum(path, length, since=None):
    """A checksum of the file's first `length` bytes: what was indexed. If it is unchanged, the file
    only grew since (an append), and reading can go on from there. CRC-32 reads at several GB/s.
    `since`, the checksum of a shorter prefix (the checkpoint a read went on from), is carried on
    over the bytes after it only: an append to a 20 MB session reads what was appended."""
    crc, start = 0, 0
    try:
        offset, value = since.split(":")
        if int(offset) <= length:
            start, crc = int(offset), int(value, 16)
    except (AttributeError, ValueError):
        pass  # no (usable) prefix checksum: from the start
    left = length - start
    with open_regular(path) as f:
        f.seek(start)
        while left > 0:
            block = f.read(min(left, 1 << 20))
            if not block:
                return None  # shorter than that now
            crc = zlib.crc32(block, crc)
            left -= len(block)
    return "%d:%08x" % (length, crc)


def _time_alone(job):
    """Whether a file that looks changed holds exactly what was read from it: read to its end (its
    resume point, whose checksum the indexed bytes still match, is where it ends), and nothing beside
    it folded into its time (sidecars, a -wal). Its time alone moved: a history copied or restored
    (every file dated now: reading each from its resume point, to find nothing, took 2.4 s at 1 GB
    on the first search), or touched. Reading it would give what the index holds."""
    ck = job.resume
    return (ck is not None and "marks" not in ck and ck.get("offset") == job.stat.st_size == job.row.size
            and isinstance(job.stat, os.stat_result))


def _resume_point(store, job):
    """The checkpoint to go on from when the file only grew since it was indexed, else None."""
    row, parser = job.row, job.parser
    if row is None or row.parser != parser.id or row.parser_version != parser.version or row.status != "ok":
        return None
    try:
        ck = store.file_checkpoint(row.id)
        if isinstance(ck, dict) and isinstance(ck.get("marks"), dict):
            return ck   # a store read before: its sessions' marks (see parse_file)
        if not parser.resumable:
            return None
        if ck and job.stat.st_size >= ck["offset"] and file_checksum(job.path, ck["offset"]) == ck["checksum"] \
                and parser.checkpoint_holds(job.path, ck):
            return ck
    except (OSError, KeyError, TypeError) + BAD_JSON:
        pass
    return None


# What a worker hands back for one file (or one slice of it): status is "ok", "skipped" (not a
# session file) or "error" (not readable now: left for the next run); payload is the Prepared
# sessions or the reason; the parser's report: skipped lines, unrecognised record types, versions.
# `restarted`: a resumed parse that had to read the file from its start (ReadAgain).
ParseResult = collections.namedtuple("ParseResult", "status payload skipped checkpoint unknown versions restarted",
                                     defaults=(False,))


def parse_file(path, parser_id, resume, limit, redact_secrets=True):
    """Run a parser on one file (or one slice of it) and compress its chunks.

    Arguments and result are plain picklable values, so this can run in a worker process.
    """
    parser = PARSERS[parser_id]
    report = ParseReport()
    restarted = False

    def result(status, payload, checkpoint=None):
        return ParseResult(status, payload, report.skipped, checkpoint, report.unknown, sorted(report.versions),
                           restarted)
    # A store of sessions read before has its sessions' marks (see Parser.session_marks): then only
    # the sessions whose mark moved, or that are new, are read (index_file keeps the others).
    old = resume.get("marks") if isinstance(resume, dict) else None
    if old is not None:
        resume = None   # (each session of a store is read whole)
    marks = only = None
    try:
        if type(parser).session_marks is not Parser.session_marks:
            marks = parser.session_marks(path)
        if marks is not None:
            if isinstance(old, dict):
                only = {sid for sid, mark in marks.items() if old.get(sid) != mark}
            sessions = parser.parse(path, report) if only is None else parser.parse_sessions(path, report, only)
        elif parser.resumable:
            try:
                sessions = parser.parse(path, report, resume=resume, limit=limit)
            except ReadAgain:
                # Whole, not in slices: a slice after the first would resume and meet the same lines.
                report, resume, restarted = ParseReport(), None, True
                sessions = parser.parse(path, report)
        else:
            sessions = parser.parse(path, report)
    except NotASessionFile as e:
        return result("skipped", "not %s %s session file (%s)" % ("an" if parser.label[:1].upper() in "AEIOU" else "a", parser.label, e))
    except OSError as e:
        return result("error", "cannot read: %s" % (e.strerror or e))
    except sqlite3.DatabaseError as e:   # an agent's store whose pages went bad while it was read
        return result("error", "cannot read: %s" % store_failure(e))
    except Exception as e:  # a parser bug must not stop the run; the file is reported instead
        return result("error", "%s parser failed: %s: %s" % (parser_id, type(e).__name__, e))
    if marks is None and not parser.resumable and (len(sessions) > 1 or isinstance(old, dict)):
        # A store of sessions whose parser gives no marks: each parsed session's digest is its mark,
        # so that only the sessions that changed are made ready and written (reading is the cheap
        # part: 0.4 s of 7 for a 50 MB database; redacting and writing all of it, the rest).
        digests = {s.session_id: session_digest(s) for s in sessions}
        if len(digests) == len(sessions):   # (ids repeated in one store: read whole, as before)
            marks = digests
            if isinstance(old, dict):
                only = {sid for sid, mark in marks.items() if old.get(sid) != mark}
                sessions = [s for s in sessions if s.session_id in only]
    try:
        prepared = [Prepared(s, fresh=resume is None, redact_secrets=redact_secrets) for s in sessions]
    except Exception as e:  # same promise as above: one bad file never stops the run
        return result("error", "%s parser failed: %s: %s" % (parser_id, type(e).__name__, e))
    checkpoint = None
    if marks is not None:
        # "read": the ids read this time when the store was read in part (None: whole)
        return result("ok", prepared, {"marks": marks, "read": sorted(only) if only is not None else None})
    if parser.resumable and sessions and sessions[0].checkpoint:
        ck = sessions[0].checkpoint
        if redact_secrets:  # the parser's state (a name so far...) is stored with the file row
            ck = redact_values(ck)
        try:
            checkpoint = dict(ck, checksum=file_checksum(path, ck["offset"], since=resume and resume.get("checksum")))
        except OSError as e:
            return result("error", "cannot read: %s" % (e.strerror or e))
    return result("ok", prepared, checkpoint)


def session_digest(s):
    """A short digest of everything a parsed session gives the index (see parse_file)."""
    import hashlib
    h = hashlib.blake2b(digest_size=12)
    h.update(json.dumps([s.agent, s.session_id, s.cwd, s.name, s.created, s.modified, s.parent, s.summary, s.labels,
                         s.complete]).encode("utf-8", "surrogatepass"))
    for c in s.chunks:
        h.update(("\x00%s\x01%s\x01%s\x01%s\x01%s\x01" % (c.kind, c.role, c.tool, c.path, c.ts)).encode(
            "utf-8", "surrogatepass"))
        h.update(c.text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def damaged_on_disk(job, result):
    """Whether a new read of an indexed file shows that bytes of it were lost (rather than that the
    agent rewrote it): lines that are no JSON at all (a block zeroed by a crash, bytes overwritten),
    or a file that shrank and now ends inside a line (cut short). Unknown or unexpected records are
    not damage: a newer agent writes those."""
    skipped = result.skipped
    return bool(skipped.get("malformed line") or (
        skipped.get("unfinished last line") and job.row is not None and job.stat.st_size < (job.row.size or 0)))


def merge_kept(old, new):
    """A session's chunk rows as read now (`new`), with the rows indexed before that this read no
    longer has (`old`, in order) put back where they were: after the last row both still hold. Rows
    are (kind, role, tool, path, ts, packed text); returns (rows, how many were put back). Rows are
    compared by their text, not its compressed bytes (another zlib compresses the same text apart)."""
    at = collections.defaultdict(list)
    for i, r in enumerate(new):
        at[(r[0], r[1], r[2], unpack(r[5]))].append(i)
    rows, j, kept = [], 0, 0
    for r in old:
        places = at.get((r[0], r[1], r[2], unpack(r[5])))
        k = bisect.bisect_left(places, j) if places else 0
        if places and k < len(places):
            rows.extend(new[j:places[k] + 1])
            j = places[k] + 1
        else:
            rows.append(r)
            kept += 1
    rows.extend(new[j:])
    return rows, kept


def keep_lost_chunks(store, file_id, prepared):
    """For a file damaged on disk (see damaged_on_disk): what was indexed from it before and this
    read lost is kept, each session's lost chunks in their place among the ones read now (`prepared`:
    the file's sessions as this read gives them, Prepared). Returns how many chunks were kept."""
    before = store.file_sessions(file_id)
    kept = 0
    for s in prepared:
        sid = before.get((s.meta.agent, s.meta.session_id))
        if sid is None:
            continue
        rows, n = merge_kept(store.packed_chunks(sid), s.rows)
        if n:
            s.rows, s.count, s.parts = rows, len(rows), None  # (parts are cut again from the rows written)
            s.touched = sorted({(r[2] or "", r[3] or "") for r in rows if r[0] == "tool"})
            kept += n
    return kept


def index_file(batch, job, result, summary, policy):
    """Replace (or extend) what the index held for one file with its parse result.

    A bad file is reported, never fatal: a file that cannot be read now keeps whatever was indexed
    from it before (and is tried again next run), and a file that was a session file and no longer
    parses ("damaged": a garbage first line, a truncated rewrite, a corrupt store) keeps its last
    good sessions until it parses again or is gone. What a file read again no longer gives is kept
    too: the chunks lost where its bytes were damaged (keep_lost_chunks), and the sessions the agent
    deleted from it (keep_vanished). A resumable file that only grew is extended from its
    checkpoint; one larger than SLICE_BYTES arrives in slices, each committed like an append.
    """
    store, resume, st = batch.store, job.resume if not result.restarted else None, job.stat
    file_id = job.row.id if job.row else None
    # A store read in part (see Parser.session_marks): the sessions it read replace theirs, those it
    # no longer holds go (or are kept as deleted), the others stay as they are.
    partial = (result.checkpoint or {}).get("read") if result.status == "ok" else None
    if resume and "marks" in resume:
        resume = None   # (a store's marks, not a place in a file to go on from)
    existing = None
    if resume and file_id is not None:
        existing = store.first_session(file_id)
    fresh = resume is None
    skipped_lines, unknown, versions, written, kept = 0, collections.Counter(), set(), [], 0
    while True:
        if result.restarted and resume:  # the parser read the file whole (ReadAgain): as a first read
            resume, existing, fresh = None, None, True
        skipped_lines += sum(result.skipped.values())
        unknown.update(result.unknown)
        versions.update(result.versions)
        if result.status == "error":  # kept as it was, tried again next run
            summary.problem(job.path, result.payload)
            store.file_unreadable(file_id, job, result.payload)
            return
        if result.status == "skipped" and job.row is not None and job.row.sessions and \
                job.row.status in ("ok", "damaged"):
            # It held sessions and no longer parses: keep them, say so, and look again when it changes.
            store.file_damaged(file_id, st, result.payload)
            summary.problem(job.path, "damaged, kept what was indexed from it before: %s" % result.payload)
            return
        prepared = result.payload if result.status == "ok" else []
        if partial is not None and file_id is not None:
            held = result.checkpoint["marks"]
            if policy.keep_deleted:
                store.keep_vanished(file_id, {key for key in store.file_sessions(file_id) if key[1] in held})
            store.delete_file_sessions(file_id, [sid for _, sid in store.file_sessions(file_id)
                                                 if sid in partial or sid not in held])
        elif fresh and file_id is not None:
            # Bytes of the file were lost since it was indexed: what this read cannot give back stays.
            if prepared and job.row.sessions and all(s.complete for s in prepared) and damaged_on_disk(job, result):
                kept = keep_lost_chunks(store, file_id, prepared)
            # Sessions the file no longer holds are kept as deleted, when the same parser (and version)
            # read it: a new parser version may rightly see the file's sessions otherwise.
            if policy.keep_deleted and job.row.sessions and (job.row.parser, job.row.parser_version) == (
                    job.parser.id, job.parser.version):
                store.keep_vanished(file_id, {(s.meta.agent, s.meta.session_id) for s in prepared})
            store.delete_file_sessions(file_id)
        fresh = False
        if file_id is None:
            file_id = store.add_file(job.path, job.parser.id)
        for s in prepared:
            if not policy.keeps(s.meta.agent, s.meta.session_id, s.meta.cwd):
                continue  # forgotten, or run in an excluded project
            existing = store.write_session(file_id, s, existing=existing if resume else None,
                                           from_seq=resume["seq"] if resume else 0)
            batch.words.update(s.words)
            written.append((s.meta.agent, s.meta.session_id))
            summary.chunks += s.count
        complete = all(s.complete for s in prepared)
        # (A file holding kept chunks is read whole at its next change, so that they stay in place.)
        checkpoint = result.checkpoint if not kept else None
        # An unfinished file keeps size -1: the next run sees it as changed and resumes it.
        store.file_read(file_id, job, st.st_size if complete else -1, "ok" if result.status == "ok" else "skipped",
                        None if result.status == "ok" else result.payload, skipped_lines, checkpoint,
                        {"types": dict(unknown), "versions": sorted(versions)} if unknown or versions else None)
        read_to = checkpoint.get("offset", st.st_size) if checkpoint else st.st_size
        batch.done(read_to - (resume["offset"] if resume else 0))
        if complete:
            break
        resume = checkpoint
        result = parse_file(job.path, job.parser.id, resume, SLICE_BYTES, policy.redact)
    # A session found in this file that the index kept from a file now gone has moved here: the
    # kept copy goes (the session follows its file), when it was on the same machine: ids repeat
    # across machines, and a copy from another one (<data dir>/remotes/NAME/, see "Other machines")
    # is another session.
    mirrors = os.path.join(os.path.abspath(os.path.dirname(batch.store.path)), "remotes", "")
    machine = mirrors + job.path[len(mirrors):].split(os.sep, 1)[0] + os.sep if job.path.startswith(mirrors) else mirrors
    for agent, session_id in written:
        batch.store.delete_kept_copies(agent, session_id, machine if machine != mirrors else None, mirrors)
    if result.status == "skipped":
        summary.problem(job.path, result.payload)  # (counted as not indexed, not as indexed)
    else:
        summary.indexed += 1
    summary.chunks_kept += kept
    summary.sessions += len(prepared)
    summary.skipped_lines += skipped_lines


def _quiet_worker():
    """Workers leave Ctrl-C to the main process (which stops them) and print nothing: if the main
    process is killed, a worker's broken pipe is no news for the user's terminal."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr = open(os.devnull, "w")


def parse_all(jobs, parallel, policy):
    """Parse results for jobs, in order. With `parallel`, parsing runs in worker processes (the
    machine's other cores) while the caller writes; a few results are kept ahead, never all.

    Workers are forked, and a process that runs other threads (a server's background refresh, an
    embedding program) must not fork: a lock another thread holds at that moment (the stderr lock,
    the allocator's, SQLite's) stays held in the child forever. There it parses in-process. (Nor can
    it use 'spawn' or 'forkserver': installed, this file runs from a cached code object, not as a
    module a fresh interpreter could import parse_file from.)"""
    args = [(job.path, job.parser.id, job.resume, SLICE_BYTES, policy.redact) for job in jobs]
    threading = sys.modules.get("threading")  # never imported: no other Python thread can be running
    if not parallel or (threading is not None and threading.active_count() > 1):
        for a in args:
            yield parse_file(*a)
        return
    import multiprocessing
    from collections import deque
    methods = multiprocessing.get_all_start_methods()
    mp = multiprocessing.get_context("fork" if "fork" in methods else None)
    try:
        pool = mp.Pool(max(1, min(4, os.cpu_count() or 2)), initializer=_quiet_worker)
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
            raise StoreError("cannot create the lock file %s: %s" % (self.path, e.strerror or e))
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

    def held_elsewhere(self):
        """Whether another indexer holds the lock now (this one holding it not)."""
        try:
            if not self.acquire(0):
                return True
        except (StoreError, OSError):
            return False   # (no lock file to be had: nobody else indexes through it either)
        self.release()
        return False


# ==================================================================================================
# Query: user text -> words, their expansions, and safe FTS5 expressions
# ==================================================================================================

MAX_QUERY_TERMS = 32
_QUERY_CHUNK = LazyPattern(r'(-?)"([^"]*)"|(\S+)')

# English function words: they say nothing about what a session was about, yet their position
# lists are the longest in the index (every match costs a walk over them). They are left out of
# the ranking expressions when the query has other words, and still highlighted; inside a
# "quoted phrase" they count as written.
STOPWORDS = frozenset("""
a an the and or of in on at to for with by from into onto about as is are was were be been being am it its
this that these those there here i we you he she they them me my our your his her their us do does did
done how what where when why which who whom whose can could should would will shall may might must
so but if then than too also just some any all has have had having get got make made let via per
please thanks thank hi hey ok okay yes lets one""".split())

# How people refer to the session itself ("the session where we...", "a chat about...", "when we
# talked about...", "remember when..."): see Query.
SESSION_NOUNS = frozenset("session sessions conversation conversations chat chats discussion discussions thread "
                          "threads transcript transcripts talked talking spoke chatted discussed discussing "
                          "remember recall find".split())
SESSION_FOLLOWERS = frozenset("about where when in on with that which we i you for from regarding the how why what".split())
SESSION_DETERMINERS = frozenset("the a an that this our my one".split())

# Coding abbreviations and their long forms, both ways. An expansion counts for matching and ranks
# below the word the user typed (see QueryWord.alternatives).
ABBREVIATIONS = [
    ("k8s", "kubernetes"), ("db", "database"), ("pg", "postgres", "postgresql"), ("auth", "authentication"),
    ("authn", "authentication"), ("authz", "authorization"), ("env", "environment"), ("envs", "environments"),
    ("config", "configuration", "cfg", "conf"), ("repo", "repository"), ("repos", "repositories"),
    ("deps", "dependencies"), ("dep", "dependency"), ("perf", "performance"), ("msg", "message"),
    ("msgs", "messages"), ("err", "error"), ("errs", "errors"), ("js", "javascript"), ("ts", "typescript"),
    ("py", "python"), ("rb", "ruby"), ("rs", "rust"), ("impl", "implementation"), ("fn", "function", "func"),
    ("args", "arguments"), ("arg", "argument"), ("param", "parameter"), ("params", "parameters"),
    ("dir", "directory"), ("dirs", "directories"), ("pkg", "package"), ("pkgs", "packages"), ("lib", "library"),
    ("libs", "libraries"), ("app", "application"), ("dev", "development"), ("prod", "production"),
    ("doc", "documentation"), ("docs", "documentation"), ("req", "request"), ("reqs", "requests"),
    ("res", "response"), ("resp", "response"), ("tmp", "temporary", "temp"), ("ci", "continuous integration"),
    ("cd", "continuous deployment"), ("gh", "github"), ("tf", "terraform"), ("ml", "machine learning"),
    ("ui", "user interface"), ("cli", "command line"), ("async", "asynchronous"), ("init", "initialize", "initialization"),
    ("btn", "button"), ("img", "image"), ("imgs", "images"), ("pw", "password"), ("pwd", "password"),
    ("passwd", "password"), ("regex", "regular expression", "regexp"), ("mgmt", "management"), ("svc", "service"),
    ("ns", "namespace"), ("vm", "virtual machine"), ("vms", "virtual machines"), ("w/", "with"), ("spec", "specification"),
    ("ssl", "tls"), ("cert", "certificate"), ("certs", "certificates"), ("calc", "calculate", "calculation"),
    ("admin", "administrator"), ("ctx", "context"), ("var", "variable"), ("vars", "variables"), ("cmd", "command"),
    ("cmds", "commands"), ("ws", "websocket"), ("mq", "message queue"), ("gc", "garbage collection"),
    ("ocr", "optical character recognition"), ("llm", "language model"), ("ssr", "server side rendering"),
    ("e2e", "end to end"), ("i18n", "internationalization", "translation"), ("l10n", "localization"),
    ("a11y", "accessibility"), ("tz", "timezone", "time zone"), ("dns", "domain name"), ("os", "operating system"),
    ("venv", "virtualenv", "virtual environment"), ("pr", "pull request"), ("prs", "pull requests"),
    ("mr", "merge request"), ("mcp", "model context protocol"), ("vscode", "vs code"), ("gha", "github actions"),
    ("ux", "user experience"), ("qa", "quality assurance"), ("sso", "single sign on"), ("2fa", "two factor"),
    ("mfa", "multi factor"), ("jwt", "json web token"), ("wsl", "windows subsystem"),
]


_ABBREVIATION_TABLE = {}


def _abbreviation_table():
    """{form: [the other forms of its group]} (both ways), built once per process (the MCP server
    searches many times)."""
    table = _ABBREVIATION_TABLE
    if not table:
        for forms in ABBREVIATIONS:
            for form in forms:
                table.setdefault(form, []).extend(f for f in forms if f != form and f not in table[form])
    return table


class QueryWord:
    """One word (or "quoted phrase") of the query.

    `alternatives` are the FTS5 strings any of which matches it, each with how much it counts:
    what the user typed counts twice (FTS5's bm25 adds up each matching phrase of an expression,
    so a phrase given twice weighs double), an expansion (an abbreviation's long form, a spelling
    correction, the parts of a camelCase name) once. `stems` lists, per alternative, the stemmed
    tokens the snippet matcher looks for, so that it matches what ranking matched.
    """

    def __init__(self, text, phrase=False, prefix=False):
        self.text, self.phrase, self.prefix = text, phrase, prefix
        self.tokens = fts_tokens(text)
        self.cjk = cjk_pattern(text)  # where it has CJK letters, how the matcher finds it (as written)
        self.pair_of = None      # the CJK word typed that this bigram was cut from (see expand_query)
        self.stop = not phrase and not prefix and all(t in STOPWORDS for t in self.tokens)
        self.expansions = []     # (kind, text): "abbreviation", "spelling", "parts"
        self.df = None           # in how many ranking documents it occurs (counted up to half of them)
        self.common = False      # in more than half of them: it tells nothing apart (see Query.stages)
        self.dropped = False     # absent from the index and nothing close: left out

    def fts(self, text=None, prefix=None):
        text = self.text if text is None else text
        prefix = self.prefix if prefix is None else prefix
        return fts_phrase(text, prefix)

    def alternatives(self, double=True):
        own = [] if self.dropped or (self.df == 0 and self.expansions) else [self.fts()] * (2 if double else 1)
        for kind, text in self.expansions:
            own.append(self.fts(text, prefix=False) if kind != "parts" else "parts : " + self.fts(text, prefix=False))
        return own

    def group(self, double=True):
        alts = self.alternatives(double)
        return alts[0] if len(alts) == 1 else "(%s)" % " OR ".join(alts) if alts else None

    def cjk_pairs(self):
        """The bigrams of a word of CJK letters alone (at least two of them), else []."""
        if self.cjk is None or self.phrase or self.prefix:
            return []
        tokens = TOKEN_RE.findall(self.text)
        if not all(_CJK_RUN.fullmatch(t) for t in tokens):
            return []
        pairs = list(dict.fromkeys(p for t in tokens for p in _bigrams(t).split()))
        return pairs if len(pairs) > 1 else []

    def match_forms(self):
        """[(stems, is_prefix)] the matcher looks for: the word itself and each expansion."""
        forms = []
        if not self.dropped and self.cjk is None:  # (a word with CJK letters is found by self.cjk)
            forms.append(([porter_stem(t) for t in self.tokens[:-1]] +
                          ([self.tokens[-1]] if self.prefix else [porter_stem(self.tokens[-1])]), self.prefix))
        for kind, text in self.expansions:
            toks = fts_tokens(text) if kind != "parts" else text.split()
            if toks:
                forms.append(([porter_stem(t) for t in toks], False))
        return forms


class Query:
    """A search box string, made safe for FTS5.

    Every word becomes a quoted FTS5 string, so punctuation, keywords (AND, OR, NOT) and code
    (`parser.py`, `OPS-306`, `std::vector<int>`) are literal text; the tokenizer turns `parser.py`
    into the phrase "parser py", which is exactly how it was indexed. Three operators are offered on
    purpose: "exact phrase", prefix* (at least 2 characters) and -word (sessions without it).
    """

    def __init__(self, text):
        self.text = text
        self.words, self.excluded = [], []
        self.pairs = {}  # a CJK word not in the index as written -> the bigrams searched instead
        self.typed = []  # the words in the order typed, repeats kept (for the phrase stage)
        clean = re.sub(r"[\x00-\x1f\x7f]", " ", text)
        seen = set()
        for m in _QUERY_CHUNK.finditer(clean):
            if m.group(3) is None:
                neg, core, prefix, phrase = bool(m.group(1)), m.group(2), False, True
            else:
                word = m.group(3)
                neg = len(word) > 1 and word[0] == "-" and word[1].isalpha()
                core = word[1:] if neg else word
                prefix = core.endswith("*")
                core = core.rstrip("*")
                phrase = False
                if prefix and sum(len(t) for t in fts_tokens(core)) < 2:
                    prefix = False
            if not fts_tokens(core):
                continue
            if not neg:
                self.typed.append(core)
            key = (neg, core.lower(), prefix)
            if key in seen:
                continue
            seen.add(key)
            if neg:
                self.excluded.append(fts_phrase(core))
            else:
                self.words.append(QueryWord(core, phrase=phrase, prefix=prefix))
        self.words = self.words[:MAX_QUERY_TERMS]
        if not self.words:
            raise UsageError("nothing to search for in %r: give at least one word%s"
                             % (text, " that is not excluded" if self.excluded else ""))
        # "the session about X", "the conversation where we X", "chat with X": words naming what is
        # searched for, not what it holds. The noun is taken as a function word, and the three
        # words are left out of the phrase (no session says "the session about users email idx").
        self.meta = set()
        low = [t.lower() for t in self.typed]
        for i, t in enumerate(low[:-1]):
            if t in SESSION_NOUNS and low[i + 1] in SESSION_FOLLOWERS and (i == 0 or low[i - 1] in STOPWORDS):
                self.meta.update(range(i - 1 if i and low[i - 1] in SESSION_DETERMINERS else i, i + 2))
                for w in self.words:  # (unless it is also said elsewhere: "the session where the session token...")
                    if w.text.lower() == t and not w.phrase and not w.prefix and low.count(t) == 1:
                        w.stop = True

    @property
    def terms(self):
        """The FTS5 groups of the words that take part in ranking. A word's own form is given twice
        only when some word has expansions (so that they weigh half of it); otherwise once."""
        words = self.ranking_words()
        double = any(w.expansions for w in words)
        return [w.group(double) for w in words]

    def ranking_words(self):
        words = [w for w in self.words if not w.dropped and w.group()]
        content = [w for w in words if not w.stop]
        return content or words

    def stages(self):
        """[(name, FTS5 expression)] from strict to loose: the words written together as typed (a
        phrase: an error message, the parts of a camelCase name), every telling word, all but one,
        any. Sessions found by an earlier stage rank above those only a later one finds.

        A word found in more than half of the ranking documents cannot tell sessions apart: BM25
        gives it no weight, and long sessions hold it anyway, so requiring it would put any long
        session above a short one that is about the query. Such words take no part in the stages
        (while at least the two rarest words do); they still count in the re-ranking (the words
        written together, the best window) and are marked in snippets. Leaving them out also
        spares FTS5 their position lists, the costliest part of a query."""
        words = self.ranking_words()
        if not words:
            return []
        out = []
        phrase = self.phrase()
        if phrase:
            out.append(("words together", phrase))
        keep = {i for i, w in enumerate(words) if not w.common}
        for _, i in sorted((w.df or 0, i) for i, w in enumerate(words) if w.common):
            if len(keep) >= min(2, len(words)):
                break
            keep.add(i)
        words = [w for i, w in enumerate(words) if i in keep]
        double = any(w.expansions for w in words)
        t = [w.group(double) for w in words]
        out.append(("all words", " AND ".join(t)))
        if 3 <= len(t) <= 8:
            out.append(("all words but one", " OR ".join("(%s)" % " AND ".join(t[:i] + t[i + 1:]) for i in range(len(t)))))
        if len(t) >= 2:
            out.append(("some words", " OR ".join(t)))
        return out

    def phrase(self):
        """The query as an FTS5 phrase, its words in the order typed (repeats kept, words the index
        does not have left out, and function words at either end too), or None: for 2-8 words,
        none of them a prefix*. A misspelt word (one the index does not have, searched as its
        nearest words) is written as each of its corrections in turn, the phrases ORed (at most
        PHRASE_VARIANTS): "parse json resposne" is "parse json response" (parseJSONResponse) or
        "parse json responses" or ..."""
        dropped = {w.text.lower() for w in self.words if w.dropped}
        typed = [t for i, t in enumerate(self.typed[:MAX_QUERY_TERMS]) if t.lower() not in dropped and i not in self.meta]
        # Function words around the words that matter are how the question is asked ("where did we
        # ... ", "... in it"), not part of what was written: the phrase starts and ends with others.
        while typed and typed[0].lower() in STOPWORDS and any(t.lower() not in STOPWORDS for t in typed):
            typed.pop(0)
        while typed and typed[-1].lower() in STOPWORDS and any(t.lower() not in STOPWORDS for t in typed):
            typed.pop()
        if not 2 <= len(typed) <= 8 or any(w.prefix for w in self.words):
            return None
        corrections = {w.text.lower(): [t for kind, t in w.expansions if kind == "spelling"]
                       for w in self.words if w.df == 0 and not w.dropped}
        variants = [[]]
        for t in typed:
            variants = [v + [c] for v in variants for c in corrections.get(t.lower()) or [t]][:PHRASE_VARIANTS]
        phrases = [fts_phrase(written_together(v)) for v in variants]
        return phrases[0] if len(phrases) == 1 else "(%s)" % " OR ".join(phrases)

    def notes(self):
        """What was searched besides the words as typed: [{"word", "searched", "why"}]."""
        out = [{"word": text, "searched": pairs, "why": "bigrams"} for text, pairs in self.pairs.items()]
        for w in self.words:
            if w.pair_of:
                continue
            if w.dropped:
                out.append({"word": w.text, "searched": [], "why": "not found anywhere"})
            elif w.expansions and (w.df == 0 or any(k != "parts" for k, _ in w.expansions)):
                out.append({"word": w.text, "searched": [t for _, t in w.expansions],
                            "why": "spelling" if w.df == 0 else w.expansions[0][0]})
        return out


PHRASE_VARIANTS = 9  # phrases of a query with misspelt words tried in the "words together" stage
RARE_EXPANSION = 4  # an abbreviation's other form is searched unless it is 4 times rarer than the word


def expand_query(store, query):
    """Find out which words occur and how often, and add expansions: abbreviations (both ways),
    camelCase parts, and for a word the index does not have, the nearest words it has (a typo)."""
    abbreviations = _abbreviation_table()
    # A CJK word the index does not have as written (a sentence typed whole, words not side by side
    # there) is searched as its bigrams, each a word: the stages then find the sessions with all of
    # them, all but one, or some, as they do for the words of a question in English.
    words = []
    for w in query.words:
        pairs = w.cjk_pairs()
        if pairs and store.doc_count(w.fts()) == 0:
            query.pairs[w.text] = pairs
            for p in pairs:
                if all(p != x.text for x in words + query.words):
                    words.append(QueryWord(p))
                    words[-1].pair_of = w.text
        else:
            words.append(w)
    query.words = words[:MAX_QUERY_TERMS]
    half = None  # half the ranking documents, counted when a word needs it (~1 ms at 1 GB)
    function_words = []  # frequent function words, counted only if they rank (below)
    for w in query.words:
        if not w.phrase:
            low = w.text.lower()
            parts = split_identifier(w.text) if not w.prefix else [low]
            if len(parts) > 1 and all(p.isalnum() for p in parts):
                w.expansions.append(("parts", " ".join(parts)))
            for long_form in abbreviations.get(low, ()):
                w.expansions.append(("abbreviation", long_form))
        w.df = store.doc_count(w.fts())
        if w.df == 0 and not w.prefix and not w.phrase:
            w.expansions += [("spelling", t) for t in near_words(store, low)[:3] if t != low]
            if not w.expansions or all(store.doc_count(w.fts(t, False)) == 0 for _, t in w.expansions):
                w.dropped = True
            continue
        if w.df == 1 and not w.prefix and not w.phrase and len(low) >= 5 and not w.expansions:
            # A word found once may itself be the typo: a much more frequent neighbour is searched too.
            w.expansions += [("spelling", t) for t in near_words(store, low, min_count=20)[:2] if t != low]
        if w.df < 3:
            continue
        if half is None:
            half = store.part_count() // 2
        if half < 2:
            continue
        if w.stop and not w.expansions:
            function_words.append(w)
        else:  # how common: counted up to half the documents, no further
            own = store.doc_count(w.fts(), half + 1)
            # An expansion much rarer than the word typed would outweigh it (BM25 weighs a word by
            # its rarity), ranking its few sessions above the many with the word: it is left out.
            w.expansions = [(kind, t) for kind, t in w.expansions
                            if kind != "abbreviation" or store.doc_count(w.fts(t, False), own + 1) * RARE_EXPANSION >= own]
            w.df = store.doc_count(w.group(False), half + 1) if w.expansions else own
            w.common = w.df > half
    # How common a function word is matters only where it ranks: when no other word is left to (see
    # Query.ranking_words). Counting "the" up to half of 20,000 documents costs 1-2 ms.
    if not any(not w.stop and not w.dropped for w in query.words):
        for w in function_words:
            w.df = store.doc_count(w.fts(), half + 1)
            w.common = w.df > half
    if all(w.dropped for w in query.words):  # nothing close to any word: search them as given (no result)
        for w in query.words:
            w.dropped, w.expansions = False, []
    return query


# -- Spelling: the vocabulary and words close to a misspelt one ----------------------------------
#
# The index keeps the vocabulary of what people and agents said (the talk of every session: the
# words typos are made in; tool output is mostly code and numbers) in `vocab`. A word absent from
# the index is matched to vocabulary words at edit distance 1 (words of 4-7 letters) or 2 (longer
# words) that start with the same letter, or with its second letter when the first was the typo;
# the closest, then the most frequent, are searched in its place (at most three).


def near_words(store, word, min_count=1):
    """Vocabulary words within edit distance 1 (words of 4-7 letters) or 2 (longer) of word, the
    closest first, then the most frequent; only those in at least min_count ranking documents."""
    if not 4 <= len(word) <= 30 or not word.isalnum() or has_cjk(word):
        return []  # (the vocabulary is Latin words: a CJK word is found by its bigrams or not at all)
    limit = 1 if len(word) <= 7 else 2
    letters, found = set(word), set()
    for first in dict.fromkeys(word[:2]):
        for term in store.vocab_terms(first, len(word) - limit, len(word) + limit):
            # An edit adds at most one letter and removes at most one: a cheap test before the real one.
            if len(letters ^ set(term)) <= 2 * limit and edit_distance(word, term, limit) <= limit:
                found.add((edit_distance(word, term, limit), term))
    ranked = []
    for d, term in sorted(found)[:12]:
        n = store.doc_count('"%s"' % term, 200)
        if n >= min_count:
            ranked.append((d, -n, term))
    return [t for _, _, t in sorted(ranked)]


def edit_distance(a, b, limit):
    """Damerau-Levenshtein distance (adjacent transpositions count 1), or limit+1 once it is more."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2, prev = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if prev2 is not None and i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


_LOWER_RUN = LazyPattern(r"[a-z0-9]+")
_UPPER_RUN = LazyPattern(r"[A-Z]+")


def _after_run(text, at):
    """Where to look next for a word that starts a camelCase part, after one found at `at`: no part
    starts inside a run of lower-case letters and digits, nor inside a run of capitals before its
    last one, so those are stepped over at once (a 200 KB run of one letter took 0.4 s otherwise)."""
    m = _LOWER_RUN.match(text, at)
    if m:
        return m.end()
    m = _UPPER_RUN.match(text, at)
    return max(at + 1, m.end() - 1) if m else at + 1


def _needle(stem, prefix=False):
    """What every token with this porter stem (or this prefix) starts with: the stem's first three
    letters; a shorter stem ending in "i" without it, since porter may have made it of a "y" (day
    -> dai, keys -> kei: "dai" is in no form of the word). Checked on the 175,000 words of Python's
    standard library. (Shorter needles match more tokens, each stemmed: "re" for "req" would.)"""
    if prefix or len(stem) > 3:
        return stem[:3]
    return stem[:-1] if stem.endswith("i") and len(stem) > 1 else stem


_NON_SPACE = LazyPattern(r"\S+")
_TOKEN_TAIL = LazyPattern("(?:[^\\W_]|[%s])*" % _ACCENTS)  # the rest of a token: letters, digits, accents
_ASCII_TOKEN_TAIL = LazyPattern("[a-z0-9]*")   # the same in ASCII text in lower case
_ACCENT_RE = LazyPattern("[%s]" % _ACCENTS)


def _overlaps_itself(word):
    """Whether two occurrences of word can overlap ("aba" in "ababa")."""
    return any(word[:k] == word[-k:] for k in range(1, len(word)))


def _class_chars(body):
    """The characters a regular-expression class body of single characters and a-b ranges holds."""
    out, i = set(), 0
    while i < len(body):
        if body[i + 1:i + 2] == "-" and i + 2 < len(body):
            out.update(map(chr, range(ord(body[i]), ord(body[i + 2]) + 1)))
            i += 3
        else:
            out.add(body[i])
            i += 1
    return frozenset(out)


# The accents unicode61 keeps inside a token (a needle after one is inside a token), as a set: a
# class of them costs 0.1 ms to compile in each of a query's expressions (see Matcher.starts).
_ACCENT_CHARS = _class_chars(_ACCENTS)


class Matcher:
    """Finds the query's words in chunk text the way the index matched them: tokens as unicode61
    finds them, compared by their porter stems, so `simplify` finds "simplified", `parser.py` finds
    "parser.py", and an expansion (`kubernetes` for `k8s`) is found and marked too.

    Each form of a word is a sequence of stems (a phrase, or a word the tokenizer cuts in several,
    like `node-v20`), the last possibly a prefix. The tokens that begin like some form's first stem
    are found at C speed (a regular expression per beginning, see Matcher.starts); only those are
    stemmed and compared.
    """

    def __init__(self, query):
        self.forms = []  # (word index, [stems], prefix)
        words = query.words
        # each one-token word as typed: a match of that very form says more than one of its stem
        self.typed = {i: w.tokens[0] for i, w in enumerate(words) if len(w.tokens) == 1 and not w.prefix}
        content = {i for i, w in enumerate(words) if not w.stop and not w.dropped}
        self.cjk = [(i, w.cjk) for i, w in enumerate(words) if w.cjk and not w.dropped and (i in content or not content)]
        for i, w in enumerate(words):
            if content and i not in content:
                continue  # stop words are not marked when the query has other words
            for stems, prefix in w.match_forms():
                if stems and stems[0]:
                    self.forms.append((i, stems, prefix))
        needles = sorted({_needle(stems[0], prefix) for _, stems, prefix in self.forms}, key=lambda n: (-len(n), n))
        # A word may also be a part of a camelCase name (indexed in the `parts` column): found by
        # what its forms start with, in lower case, where a part of a name starts (see _part_spans).
        self.part_needles = sorted({_needle(stems[0], prefix) for _, stems, prefix in self.forms
                                    if len(stems) == 1 and stems[0].isascii() and stems[0][:1].isalpha()})
        # Capitalised or in capitals, where such a part starts (_part_spans).
        self.capitals = sorted({v for n in self.part_needles for v in (n[:1].upper() + n[1:], n.upper())},
                               key=lambda n: (-len(n), n))
        # Each needle where a token starts (not after a letter or digit), with the letters and digits
        # after it: one regular expression per needle, its literal first, so that the scan runs at C
        # speed (an alternation is tried at every position, 2-3 times slower) and each match is a
        # token start (the checks per match were most of a search's Python time). Accents are seen
        # to in Python (_token_spans): rare, and a class of them is slow to compile.
        self.needles = needles
        self.starts = [re.compile("%s(?<![^\\W_]%s)[^\\W_]*" % (re.escape(n), re.escape(n))) for n in needles]
        self.part_starts = [re.compile("%s(?<=[A-Za-z0-9]%s)" % (re.escape(n), re.escape(n))) for n in self.capitals]
        # Forms by their first stem (one dict lookup per candidate token); one-word prefixes apart.
        self.by_stem, self.prefixes = {}, []
        self._stems = {}  # token -> its stem: the same words come back in every chunk
        # A typed word may be two neighbouring parts of a camelCase name (indexed joined, see
        # _name_parts): "websocket" in WebSocketServer. Found with str.find, checked at part edges.
        self.joined = [(i, w.tokens[0]) for i, w in enumerate(words)
                       if (i in content or not content) and len(w.tokens) == 1 and not w.prefix and not w.dropped
                       and w.tokens[0].isalpha() and w.tokens[0].isascii() and len(w.tokens[0]) >= 4]
        for form in self.forms:
            if form[2] and len(form[1]) == 1:
                self.prefixes.append(form)
            else:
                self.by_stem.setdefault(form[1][0], []).append(form)
        # What words_in_each scans a part for: each needle once, wherever it is (what starts
        # there, a token, a camelCase part or a joined word, is told in Python), instead of a scan
        # per needle for tokens, two per part needle for parts and one per joined word: 3 scans of
        # ~1 MB instead of 12 for a 3-word query, the scans being most of its cost. (None: a needle
        # or joined word that can overlap itself, which the scans of spans() step over otherwise.)
        parts, joined_by = set(self.part_needles), {}
        for i, w in self.joined:
            n = max((n for n in needles if w.startswith(n)), key=len, default=None)
            joined_by.setdefault(n, []).append((i, w))
        self.scans = [(n, re.compile(re.escape(n)), (n[:1].upper() + n[1:], n.upper()) if n in parts else (),
                       joined_by.get(n, ())) for n in needles]
        if None in joined_by or not all(n.isascii() and n.isalnum() for n in needles) \
                or any(_overlaps_itself(w) for w in needles + [w for _, w in self.joined]):
            self.scans = None

    def spans(self, text):
        """[(start, end, word index)] of every match, in order."""
        out = [(m.start(), m.end(), i) for i, rx in self.cjk for m in rx.finditer(text)]
        if not self.needles:
            return sorted(out)
        text = cjk_blanked(text)  # other words as FTS5 has them: "React" in "用React写"
        by_stem, prefixes, cache = self.by_stem, self.prefixes, self._stems
        low = lower_in_place(text)
        if self.part_needles:
            out += self._part_spans(text)
        if self.joined:
            out += self._joined_spans(text, low)
        for at, last in set(self._token_spans(low)):   # (once where two needles start a token: `c`, `cod`)
            token = text[at:last]
            if not token.islower():
                out += self._first_part(text, at, last)
            folded = token.lower() if token.isascii() else fold_token(token)
            stem = cache.get(folded)
            if stem is None:
                stem = cache[folded] = porter_stem(folded)
            for i, stems, prefix in by_stem.get(stem, ()):
                if len(stems) == 1:
                    out.append((at, last, i))
                else:
                    end = self._phrase_end(text, last, stems[1:], prefix)
                    if end:
                        out.append((at, end, i))
            for i, stems, _ in prefixes:
                if folded.startswith(stems[0]):
                    out.append((at, last, i))
        out.sort()
        return out

    def _token_spans(self, low):
        """[(start, end)] of the tokens of `low` (text in lower case) that start with a needle, once
        per needle that starts them (Matcher.starts): one after an accent that unicode61 keeps in a
        token is inside a token, and one followed by such an accent goes on over it."""
        out, n = [], len(low)
        for rx in self.starts:
            for m in rx.finditer(low):
                at, end = m.span()
                if at and low[at - 1] in _ACCENT_CHARS:
                    continue
                if end < n and low[end] in _ACCENT_CHARS:
                    end = _TOKEN_TAIL.match(low, end).end()
                out.append((at, end))
        return out

    @staticmethod
    def _phrase_end(text, pos, rest, prefix):
        """Where the phrase ends when the tokens after `pos` are `rest` (else None)."""
        for k, want in enumerate(rest):
            t = TOKEN_RE.search(text, pos)
            if not t:
                return None
            folded = fold_token(t.group())
            if not (folded.startswith(want) if prefix and k == len(rest) - 1 else porter_stem(folded) == want):
                return None
            pos = t.end()
        return pos

    def _part_spans(self, text):
        """[(start, end, word index)] where a one-word form is a part of a camelCase name inside it,
        as identifier_parts cuts it for the index: Payment in handlePaymentIntent, HTTP in
        getHTTPResponse, Server in HTTPServer, Client in OAuth2Client. Such a part starts with a
        capital (after a lower-case letter or digit, or the last of an acronym's capitals before a
        lower-case letter), so only the forms' needles Capitalised or in capitals are looked for, after
        an ASCII letter or digit. A name's first part is found with the name (_first_part)."""
        out = []
        for at in {m.start() for rx in self.part_starts for m in rx.finditer(text)}:  # (`A` and `And` start one)
            prev = text[at - 1]  # (an ASCII letter or digit)
            if prev.islower() or prev.isdigit() or prev.isupper() and text[at + 1:at + 2].islower():
                out += self._part_match(text, at)
        return out

    def _first_part(self, text, at, end):
        """_part_match for a token at text[at:end] when it is a camelCase name (a case change in it),
        as identifier_parts finds names: handle in handlePaymentIntent, HTTP in HTTPServer."""
        if _CASE_CHANGE_RE.search(text, at, end) and (name := _IDENT_RE.match(text, at)) and name.end() == end:
            return self._part_match(text, at)
        return []

    def _part_match(self, text, at):
        """[(start, end, word index)] for the camelCase part starting at `at`, if a form is it."""
        part = _CAMEL_PART_RE.match(text, at)
        if part is None:
            return []
        part = part.group().lower()
        stem = self._stems.get(part)
        if stem is None:
            stem = self._stems[part] = porter_stem(part)
        out = [(at, at + len(part), i) for i, stems, _ in self.by_stem.get(stem, ()) if len(stems) == 1]
        # `write*` finds StreamWriter, as its parts column does
        return out + [(at, at + len(part), i) for i, stems, _ in self.prefixes if part.startswith(stems[0])]

    def _joined_spans(self, text, low):
        """[(start, end, word index)] where a typed word is two or more neighbouring parts of a
        camelCase name: it starts a token or a part, ends one, and holds a case change."""
        out = []
        for i, w in self.joined:
            at = low.find(w)
            while at >= 0:
                end = at + len(w)
                if (not text.startswith(w, at)  # as typed, in lower case: no case change inside (most)
                        and (at == 0 or not text[at - 1].isalnum() or (text[at].isupper() and not text[at - 1].isupper()))
                        and (end == len(text) or not text[end].isalnum() or text[end].isupper() or text[end].isdigit())
                        and _CASE_CHANGE_RE.search(text, at, end)):
                    out.append((at, end, i))
                nxt = low.find(w, at + 1)
                # a word overlapping itself (a long run of one letter): step over the run at once
                at = nxt if nxt < 0 or nxt >= end else low.find(w, _after_run(text, at))
        return out

    def words_in(self, text):
        """The set of query words found in text: what spans() finds, for less."""
        return self.words_in_each([text])[0]

    def words_in_each(self, texts):
        """[words_in(text) for text in texts], with one scan over the texts joined (a ranked part's
        ~100 chunks: the scans cost less than a hundred calls). A common word can match hundreds of
        times in a chunk; each distinct token of a chunk is looked at once. A word of several tokens
        (a phrase, `node-v20`) needs positions: spans() then, for that chunk."""
        found = [{i for i, rx in self.cjk if rx.search(t)} for t in texts]
        if not self.needles:
            return found
        # A line break between chunks: no token, part or name runs across it. A part with a letter
        # outside ASCII is blanked and lowered chunk by chunk: one such letter would put the whole
        # part (100-300 KB) on the slow paths of both (1 ms of a ranked part's 3 to 5).
        text = "\n".join(texts)
        ascii = text.isascii()
        if ascii:
            low = text.lower()
        else:
            blanked = [cjk_blanked(t) for t in texts]
            text = "\n".join(blanked)
            low = "\n".join([lower_in_place(t) for t in blanked])
        ends = list(itertools.accumulate(len(t) + 1 for t in texts))
        where = bisect.bisect_right  # the chunk of a position: the first whose end is after it
        tokens = set()   # (chunk, token) of the tokens that start with a needle
        if self.scans is not None and (ascii or not _ACCENT_RE.search(low)):
            self._scan(text, low, ends, found, tokens, _ASCII_TOKEN_TAIL if ascii else _TOKEN_TAIL)
        else:   # (accents that unicode61 keeps inside a token: _token_spans sees to them)
            if self.joined:
                for at, _, i in self._joined_spans(text, low):
                    found[where(ends, at)].add(i)
            for at, end in self._token_spans(low):
                k, token = where(ends, at), low[at:end]
                tokens.add((k, token))
                if not text.startswith(token, at):  # capitals: maybe a camelCase name
                    found[k].update(i for _, _, i in self._first_part(text, at, end))
            if self.part_needles:
                for at, _, i in self._part_spans(text):
                    found[where(ends, at)].add(i)
        by_stem, cache, by_spans = self.by_stem, self._stems, set()
        for k, token in tokens:
            folded = token.lower() if token.isascii() else fold_token(token)
            stem = cache.get(folded)
            if stem is None:
                stem = cache[folded] = porter_stem(folded)
            for i, stems, prefix in by_stem.get(stem, ()):
                if len(stems) > 1:
                    by_spans.add(k)   # (whether the rest of it follows: spans() tells)
                else:
                    found[k].add(i)
            for i, stems, _ in self.prefixes:
                if folded.startswith(stems[0]):
                    found[k].add(i)
        for k in by_spans:
            found[k] |= {i for _, _, i in self.spans(texts[k])}
        return found

    def _scan(self, text, low, ends, found, tokens, tail):
        """words_in_each's look at a part without accents (`low`: it in lower case), by self.scans:
        where a needle starts a token (not after a letter or digit), the token (up to where `tail`
        ends) goes to `tokens`, and a camelCase name starting there has its first part looked at
        (_first_part); inside a token, only a capital can start a part (after an ASCII letter or
        digit, as _part_spans finds them) or a joined word (as _joined_spans does); a joined word
        at either."""
        where, n_text, tail = bisect.bisect_right, len(text), tail.match
        first_part, part_match, change = self._first_part, self._part_match, _CASE_CHANGE_RE.search
        for n, rx, capitals, joined in self.scans:
            size = len(n)
            for m in rx.finditer(low):
                at = m.start()
                inside = at and low[at - 1].isalnum()
                if inside:
                    if not text[at].isupper():
                        continue
                    prev = text[at - 1]
                    if text[at:at + size] in capitals and prev.isascii() and (
                            prev.islower() or prev.isdigit() or prev.isupper() and text[at + 1:at + 2].islower()):
                        found[where(ends, at)].update(i for _, _, i in part_match(text, at))
                    if prev.isupper():
                        continue   # (a joined word starts a token or a part after a lower-case letter or digit)
                else:
                    end = tail(low, at + size).end()
                    k, token = where(ends, at), low[at:end]
                    tokens.add((k, token))
                    if not text.startswith(token, at):  # capitals: maybe a camelCase name
                        found[k].update(i for _, _, i in first_part(text, at, end))
                for i, w in joined:
                    end = at + len(w)
                    if (low.startswith(w, at) and not text.startswith(w, at)
                            and (end == n_text or not text[end].isalnum() or text[end].isupper() or text[end].isdigit())
                            and change(text, at, end)):
                        found[where(ends, at)].add(i)

    @staticmethod
    def snippet(text, spans, width=SNIPPET_CHARS):
        """A window of about `width` characters around the densest cluster of matches, its white space
        made single spaces: {"snippet": text, "highlights": [[start, end], ...]}, the matches' offsets
        in it. (Offsets, not marks in the text: any mark is also text a session may hold.)"""
        if not spans:  # (never expected: the matcher's two scans agree; a search must not fail on it)
            text = " ".join(text[:width].split())
            return {"snippet": text + ("…" if len(text) >= width else ""), "highlights": []}
        best, best_n, j = spans[0][0], 0, 0
        window = collections.Counter()  # word -> matches starting in [start, start + 2/3 width]
        for k, (start, _, _) in enumerate(spans[:400]):  # slide a window over the matches: O(n)
            while j < len(spans) and spans[j][0] <= start + 2 * width // 3:
                window[spans[j][2]] += 1
                j += 1
            if len(window) > best_n:
                best, best_n = start, len(window)
            window[spans[k][2]] -= 1
            if not window[spans[k][2]]:
                del window[spans[k][2]]
        lo = max(0, best - width // 3)
        hi = min(len(text), lo + width)
        if lo > 0:
            lo = text.find(" ", lo, best) + 1 or lo
        if hi < len(text):
            cut = text.rfind(" ", lo, hi)
            hi = cut if cut > best else hi
        marks = []  # matches inside the window; touching ones (parts of one camelCase name) as one
        for s, e, _ in spans:
            if lo <= s and e <= hi:
                if marks and s <= marks[-1][1]:
                    marks[-1][1] = max(marks[-1][1], e)
                else:
                    marks.append([s, e])
        # White space becomes single spaces, as the marks are moved along with the words they mark.
        raw, prefix = text[lo:hi], "…" if lo > 0 else ""
        words = [(m.start(), m.end()) for m in _NON_SPACE.finditer(raw)]
        starts, at, n = [a for a, _ in words], [], len(prefix)
        for a, b in words:
            at.append(n)
            n += b - a + 1

        def moved(i, end):
            k = bisect.bisect_right(starts, i - end) - 1  # the word holding offset i (its end: i - 1)
            return at[k] + i - starts[k]
        highlights = [[moved(s - lo, False), moved(e - lo, True)] for s, e in marks]
        return {"snippet": prefix + " ".join(raw[a:b] for a, b in words) + ("…" if hi < len(text) else ""),
                "highlights": highlights}

    def as_typed(self, text, spans):
        """How many different query words the spans found in the very form typed (case aside)."""
        return len({i for a, b, i in spans if text[a:b].lower() == self.typed.get(i)})

    @staticmethod
    def coverage(spans, width=SNIPPET_CHARS * 2):
        """The most distinct words found within `width` characters of each other (proximity)."""
        best, j = 0, 0
        window = collections.Counter()
        for k, (start, _, i) in enumerate(spans):
            window[i] += 1
            while spans[j][0] < start - width:
                window[spans[j][2]] -= 1
                if not window[spans[j][2]]:
                    del window[spans[j][2]]
                j += 1
            best = max(best, len(window))
        return best


# ==================================================================================================
# Search: rank sessions, apply filters, pick the best matching chunks
# ==================================================================================================


# Agents name the same tools differently; --tool NAME matches the whole family NAME belongs to, so
# `--tool bash` finds Claude Code's Bash, Codex's shell and Gemini's run_shell_command alike.
TOOL_FAMILIES = [
    {"bash", "shell", "sh", "exec_command", "local_shell", "local_shell_call", "run_shell_command",
     "execute_command", "run_terminal_cmd", "run_terminal_command", "run_command", "terminal", "command",
     "shell_command", "powershell", "run"},
    {"read", "read_file", "readfile", "view", "view_file", "open_file", "cat"},
    {"edit", "edit_file", "multiedit", "str_replace", "str_replace_editor", "str_replace_based_edit_tool",
     "apply_patch", "patch", "replace", "search_replace", "replace_in_file", "apply_diff"},
    {"write", "write_file", "create_file", "write_to_file"},
    {"grep", "search", "search_files", "codebase_search", "grep_search", "ripgrep", "rg"},
]


def tool_family(name):
    """The lower-case tool names that --tool NAME matches."""
    name = name.lower()
    for family in TOOL_FAMILIES:
        if name in family:
            return family
    return {name}


def case_insensitive_fs(path):
    """Whether the file system holding `path` ignores case in names (macOS and Windows do by default):
    the nearest existing folder with a letter in its name is looked up under its other case. A path
    with no such folder (a session from another machine) follows this system's default."""
    d = path
    while True:
        name = os.path.basename(d)
        if name.swapcase() != name and os.path.isdir(d):
            try:
                return os.path.samefile(d, os.path.join(os.path.dirname(d), name.swapcase()))
            except OSError:
                return False
        parent = os.path.dirname(d)
        if parent == d:
            return sys.platform in ("darwin", "win32")
        d = parent


_WINDOWS_PATH = LazyPattern(r"[A-Za-z]:(?:[\\/]|\Z)")


class Filters:
    """Session filters shared by the CLI flags and the JSON API."""

    def __init__(self, cwd=None, after=None, before=None, agent=None, tools_only=False, tool=None, path=None,
                 current=(), host=None):
        # A Windows folder (C:\Users\x, C:/Users/x, c:\...: sessions recorded on Windows, searched
        # from anywhere) is matched as Windows sees it: either slash, any case (Qwen wrote both
        # c:\Users\x\master and C:\Users\x\master for one folder of one project).
        self.windows = bool(cwd) and _WINDOWS_PATH.match(cwd) is not None
        if self.windows:
            self.cwd = cwd.replace("/", "\\").rstrip("\\") or cwd
            self.cwd += "\\" if self.cwd.endswith(":") else ""   # C:\ itself
        else:
            self.cwd = os.path.abspath(os.path.expanduser(cwd)).rstrip(os.sep) or os.sep if cwd else None
        # --cwd names a folder: the same folder, with the same rule for the folder and below it, as
        # the file system sees it (case-sensitive unless the file system ignores case).
        self.fold_case = bool(self.cwd) and (self.windows or case_insensitive_fs(self.cwd))
        self.after = iso(parse_when(after)) if after else None
        self.before = iso(parse_when(before)) if before else None
        if agent and agent not in PARSERS:
            raise UsageError("unknown agent %r (known: %s)" % (agent, ", ".join(PARSERS)))
        self.agent = agent
        self.tool = sorted({name for t in (tool or []) if t for name in tool_family(t)})
        self.tools_only = tools_only or bool(self.tool)
        self.path = path
        self.current = set(current)  # (agent, session id) of the sessions the caller runs inside
        self.host = host  # (path prefix, inside): a remote's mirror, or outside every mirror (host_filter)
        self.mirrors = None  # <data dir>/remotes/: sessions below it were copied from other machines

    def key(self, agent, session_id, path):
        """What makes two stored sessions one for the ranking (an agent's database and its older JSON
        files hold the same session): the agent and the id, and the machine the file came from (ids
        repeat across machines: a history copied to a second machine goes on differently there)."""
        path = fs_path(path)
        if self.mirrors and path and path.startswith(self.mirrors):
            return agent, session_id, path[len(self.mirrors):].split(os.sep, 1)[0]
        return agent, session_id


LONG_QUESTION = 5       # ranking words from which a query is a long question (see _in_order)
LONG_RERANK = 4         # candidates of each stage re-ranked by proximity for a long question
PROXIMITY_WORDS = 3     # from 3 words, the first PROXIMITY_TOP are re-ranked by proximity within their stage
PROXIMITY_TOP = 10
# Each candidate re-ranked costs a read of its best part (~1.5 ms at 1 GB, the most costly step of a
# search after FTS5). Ten for a short query: a session saying the words together once can rank
# below several that say them apart more often (a test has six such); four per stage for a long
# question, whose pool spans every stage: six ranked nothing better on the relevance sets (84 + 15
# queries, three layouts) and cost a sixth of such a search.


class Candidate:
    """A session the ranking found: its row id, bm25 score (positive, higher is better), the stage
    that found it, and its best part's chunk range; its best chunks are found when it is re-ranked
    or shown."""

    __slots__ = ("sid", "score", "stage", "stage_name", "part", "doc", "key", "chunks", "coverage")

    def __init__(self, sid, score, stage, stage_name, part, doc, key):
        self.sid, self.score, self.stage, self.stage_name = sid, score, stage, stage_name
        self.part, self.doc, self.key = part, doc, key
        self.chunks = self.coverage = None   # (best_chunks)


PREFETCH_MIN_DOCS = 2000  # every word in this many documents: the next stage is fetched alongside
# (a stage costs ~2.5 us per document holding its words: 5 ms here; a second connection and a
# thread cost ~1.5 ms, on the other core while the first stage runs)


def ranked_sessions(store, query, filters, need, per_stage=0, prefetch=False):
    """At least `need` Candidates (when there are), best first: sessions with every word, then
    all but one, then any. A session scores as its best part; one session stored twice (an agent's
    database and its older JSON files) counts once. Each stage asks FTS5 for a bounded number of
    rows (LIMIT), more only when those did not hold enough distinct sessions; a stage that runs
    past STAGE_SECONDS (thousands of documents holding every common word) is given up. With
    `per_stage`, every stage runs and gives at least that many sessions (when it has them), for the
    long-question re-ranking (see _in_order); a stage after one whose LIMIT left sessions out then
    excludes that one's matches (stages are nested: each holds the stricter ones), so that which
    sessions a stage gives never depends on how many rows the page asked for.

    When every word is in thousands of documents, the words-together stage (a phrase: FTS5
    compares the words' positions in each document holding them all) and the next one (BM25 over
    them) each cost tens of milliseconds: with `prefetch` (a second connection to the index) the next
    stage is fetched alongside the first, and its rows are used if the first does not fill the page.
    A long question runs every stage, the last (any word: BM25 over most documents) often the
    costliest: it is fetched alongside all the others, as it runs when a stage before it was cut,
    which is nearly always when it costs much; its rows are used only if that was so (else it runs
    as before), so the results are those of stage after stage."""
    ranking = store.ranking(filters, query.excluded)
    stages = [(name, "{tools parts} : (%s)" % expr if filters.tools_only else expr) for name, expr in query.stages()]
    words = query.ranking_words()
    ahead = None  # a later stage's rows, fetched alongside: (stage, its expression as run, _Prefetch)
    try:
        if (prefetch and not per_stage and len(stages) > 1 and stages[0][0] == "words together"
                and all((w.df or 0) >= PREFETCH_MIN_DOCS for w in words)):
            ahead = (1, stages[1][1], ranking.prefetch(stages[1][1], min(max(2 * need, 20), 1 << 62)))
        elif prefetch and per_stage and len(stages) > 1 and sum(w.df or 0 for w in words) >= PREFETCH_MIN_DOCS:
            final = "(%s) NOT (%s)" % (stages[-1][1], stages[-2][1])
            ahead = (len(stages) - 1, final, ranking.prefetch(final, min(max(2 * max(need, per_stage), 20), 1 << 62)))
    except (sqlite3.Error, RuntimeError):  # no second connection or thread here: one after the other
        ahead = None
    out, seen, keys = [], set(), set()
    stricter, cut = None, False  # the last stage run, and whether a LIMIT left out some of its rows
    try:
        for stage, (name, expr) in enumerate(stages):
            run = "(%s) NOT (%s)" % (expr, stricter) if per_stage and cut else expr
            want = max(need - len(out), per_stage)
            limit = min(max(2 * want, 20), 1 << 62)
            deadline = time.monotonic() + STAGE_SECONDS
            fetched = None
            if ahead and ahead[0] == stage:
                _, ahead_run, fetched = ahead
                if ahead_run != run:   # (not as it runs: stopped, the core freed, and run here)
                    fetched.close()
                    fetched = None
            try:
                while True:
                    rows = fetched.take(limit) if fetched else None
                    if rows is None:
                        rows = ranking.rows(run, limit, deadline)
                    fresh = {r[0] for r in rows if r[0] not in seen and filters.key(*r[4:6], r[7]) not in keys}
                    if len(fresh) >= want or len(rows) < limit:
                        break
                    limit = min(limit * 4, 1 << 62)
            except sqlite3.OperationalError as e:
                if "interrupt" not in str(e):
                    raise
                continue  # too slow: leave this stage to the looser ones
            stricter, cut = expr, cut or len(rows) >= limit
            for sid, score, first, last, agent, session_id, doc, path in rows:
                key = filters.key(agent, session_id, path)
                if sid not in seen and key not in keys:
                    seen.add(sid)
                    keys.add(key)
                    out.append(Candidate(sid, -score, stage, name, (first, last), doc, key))
            if len(out) >= need and not per_stage:
                break
    finally:
        if ahead:
            ahead[2].close()
    return out


def best_chunks(store, session, part, matcher, filters, limit=MATCHES_PER_SESSION):
    """The chunks of a session that match best, with where the query words are in them: those of
    its best part, or with a tool filter those of the asked-for tool calls anywhere in the session;
    its name alone when no chunk matches. Also returns, of its best chunks, the most distinct query
    words found close together, and how many were found as typed (the re-ranking's key: see
    _in_order). -> ([(score, seq, spans, kind, role, tool, timestamp, text)], coverage); match_dicts
    makes them the matches shown."""
    rows = store.match_chunks(session["id"], part, filters.tools_only, filters.tool)
    found = [(words, *row) for words, row in zip(matcher.words_in_each([r[5] for r in rows]), rows) if words]
    # A word found in few chunks of the part says more than one found in all of them: each word
    # weighs by its rarity here, a chunk by the words it has and by its kind. Where the words are
    # (spans, for snippets and proximity) is worked out for the chunks shown only.
    df = collections.Counter(i for words, *_ in found for i in words)
    n = len(found)
    scored = sorted(((sum(math.log(1 + n / df[i]) for i in words) * KIND_WEIGHT.get(kind, 0.5), seq,
                      kind, role, tool, ts, text) for words, seq, kind, role, tool, ts, text in found),
                    key=lambda x: (-x[0], x[1]))
    chunks = [(w, seq, matcher.spans(text), kind, role, tool, ts, text)
              for w, seq, kind, role, tool, ts, text in scored[:limit]]
    coverage = max(((Matcher.coverage(spans), matcher.as_typed(text, spans)) for _, _, spans, *_, text in chunks),
                   default=(0, 0))
    # The session's name and summary say what it is about in a few words: query words held together
    # there count as they do in a chunk ("AI agents autonomy scaling" for the session titled "AI Agents:
    # Architecture, Autonomy, and Scaling Challenges", whose talk holds two of them near each other).
    label = "\n".join(t for t in (session.get("name"), session.get("summary")) if t) if not filters.tools_only else ""
    label_spans = matcher.spans(label) if label else []
    if label_spans:
        coverage = max(coverage, (Matcher.coverage(label_spans), matcher.as_typed(label, label_spans)))
        if not chunks:   # found by its name (or summary) alone: that is the match to show (no chunk: seq null)
            chunks.append((0.0, None, label_spans, "name", None, None, None, label))
    return chunks, coverage


def match_dicts(chunks):
    """best_chunks' chunks as the matches of a result, each with its snippet. ("_words": the text
    each match found, for matchedWords; result_json takes it out.)"""
    return [{"seq": seq, "kind": kind, "role": role, "tool": tool, "timestamp": ts, "score": round(w, 3),
             **Matcher.snippet(text, spans), "_words": {text[a:b].lower() for a, b, _ in spans}}
            for w, seq, spans, kind, role, tool, ts, text in chunks]


SHORT_ID_MIN = 8
# One session id can name several sessions: files that are not copies of each other (Gemini CLI
# writes a side question as a second session-<time>-<id>.jsonl with the parent's id; a user copies a
# history and continues both). The short id of each then ends in "~N", N its place among them by
# file path, which `show` and `forget` resolve; the id alone lists them as ambiguous.
COPY_MARK = "~"
_COPY_REF_RE = LazyPattern(r"^(.+)~([1-9][0-9]{0,5})$", re.S)


def short_id(store, session_id, row_id=None):
    """The shortest prefix of a session id, at least SHORT_ID_MIN characters, that no other session
    id in the index starts with: ids made within a minute (UUIDv7, timestamped ids) share their first
    eight, so a fixed-length prefix would be ambiguous for `show` and `forget`. The ids next to it in
    sorted order are the only ones that can share a longer prefix. With the session's row id, a
    session that shares its id with others gets its place among them (COPY_MARK)."""
    longest = 0
    for other in store.neighbour_ids(session_id):
        if other:
            common = os.path.commonprefix([session_id.lower(), other.lower()])
            longest = max(longest, len(common))
    short = session_id[:max(SHORT_ID_MIN, longest + 1)]
    if row_id is not None:
        same = store.same_id_rows(session_id)
        if len(same) > 1 and row_id in same:
            short += "%s%d" % (COPY_MARK, same.index(row_id) + 1)
    return short


def resume_command(row):
    """The command that reopens an indexed session in its agent, from its stored row (session_dict);
    None when the agent has none or the session's file is gone."""
    parser = PARSERS.get(row["agent"])
    return parser.resume_command(row) if parser and not row.get("deleted") else None


def search(store, query, filters, limit=DEFAULT_LIMIT, offset=0, matches=MATCHES_PER_SESSION, page=None):
    """Rank sessions for a query and yield the page asked for, one result at a time (the caller stops
    when its output is full): (session dict, score, stage, matches); a last None means that more
    results exist after the page. `page`, a dict, gets "size": how many results the page holds.

    Only what is shown is built: the ranking asks FTS5 for offset + limit + 1 sessions, and the
    best chunks and snippets of a result are found when it is yielded. (With --tool the words must
    be in a call of that tool: each candidate is checked, from the first, to count the offset right.)
    """
    expand_query(store, query)
    matcher = Matcher(query)
    need = offset + limit + 1
    verify = filters.tools_only
    try:
        long_question = len(query.ranking_words()) >= LONG_QUESTION
        candidates = ranked_sessions(store, query, filters, need if not verify else max(need * 2, 40),
                                     per_stage=LONG_RERANK if long_question else 0, prefetch=not store.readonly)
        if page is not None:
            page["size"] = min(limit, max(0, len(candidates) - offset))
        shown = 0
        order = _in_order(store, candidates, query, matcher, filters, matches)
        for c, s in itertools.islice(order, 0 if verify else min(offset, len(candidates)), None):
            if s is None:
                continue  # removed since it was ranked: another process (a server's background) wrote between
            if c.chunks is None:
                c.chunks, c.coverage = best_chunks(store, s, c.part, matcher, filters, limit=matches)
            if verify and not c.chunks:
                continue  # the words were in some tool call, but not in one of the asked-for tools
            shown += 1
            if verify and shown <= offset:
                continue
            if shown > (offset if verify else 0) + limit:
                yield None  # one more exists
                return
            yield s, c.score, c.stage_name, match_dicts(c.chunks)
    except sqlite3.OperationalError as e:
        if _is_corrupt(e):
            raise
        raise SesameError("search failed: %s" % e, hint="report this query; it should have been made safe")


def _in_order(store, candidates, query, matcher, filters, matches):
    """The candidates in the order shown, each with its session row (None: removed since it was
    ranked), as the caller takes them: the first ones re-ranked by where their words are, which
    BM25 does not see: by how many different query words their best chunks hold close together (a
    window of about 400 characters), then by how many of those were found as typed (not only
    through their stem), BM25 breaking ties. The candidates re-ranked are the same whatever page is
    asked for, so paging stays exact; the caller's own sessions come last (they hold the query).
    The rest are read as the caller takes them, and snippets are made for the results shown only
    (best_chunks, then match_dicts): an agent's page of 4,000 characters shows 3-4 of the 10
    candidates re-ranked (their snippets were ~1 ms of a warm search at 1 GB).

    - 3-4 words: the first PROXIMITY_TOP holding every word (or the phrase), within their stage.
    - A long question (LONG_QUESTION words or more) is rarely answered by a session holding every
      one of its words: long sessions hold them all, scattered. So the first LONG_RERANK candidates
      of each stage are re-ranked across stages, and come first."""
    def read(c):
        s = store.session(c.sid)
        if c.chunks is None:
            c.chunks, c.coverage = best_chunks(store, s, c.part, matcher, filters, limit=matches) if s else ([], (0, 0))
        return s

    def ranked():
        n_words = len(query.ranking_words())
        if n_words >= LONG_QUESTION:
            per_stage = collections.Counter()
            pool = []
            for c in candidates:
                if per_stage[c.stage] < LONG_RERANK:
                    per_stage[c.stage] += 1
                    pool.append(c)
            key = lambda c: (-c.coverage[0], -c.coverage[1], c.stage, -c.score)
        elif n_words >= PROXIMITY_WORDS:
            pool = [c for c in candidates[:PROXIMITY_TOP] if c.stage_name in ("words together", "all words")]
            key = lambda c: (c.stage, -c.coverage[0], -c.coverage[1], -c.score)
        else:
            pool, key = [], None
        rows = {id(c): read(c) for c in pool}
        yield from ((c, rows[id(c)]) for c in sorted(pool, key=key))
        yield from ((c, store.session(c.sid)) for c in candidates if id(c) not in rows)

    last = []
    for c, s in ranked():
        if c.key in filters.current:
            last.append((c, s))
        else:
            yield c, s
    yield from last


TITLE_CHARS = 80


def session_title(store, s):
    """What a result is called: its name, else the first line the user wrote (most sessions of Claude
    Code and Codex have no name: 228 of 265 and 79 of 102 in the real-world corpus; the agents' own
    resume lists show the first prompt too). Display only: the ranked name column stays the name."""
    if s["name"]:
        return s["name"]
    line = next((l for l in store.first_user_text(s["id"]).splitlines() if l.strip()), "")
    line = " ".join(line.split())
    return (line[:TITLE_CHARS - 1] + "…" if len(line) > TITLE_CHARS else line) or None


def fallback_snippet(store, s):
    """A session matched on its name only: show the first thing the user said."""
    text = " ".join(store.first_user_text(s["id"]).split())
    return text[:200] + ("…" if len(text) > 200 else "")


# ==================================================================================================
# Output: JSON objects, human text, colour policy
# ==================================================================================================


# How the text output names the options that move on, on the command line and for MCP clients.
CLI_WORDS = {"around": "--around SEQ", "max_chars": "--max-chars", "offset": "--offset %d"}
MCP_WORDS = {"around": "around: SEQ", "max_chars": "max_chars", "offset": "offset: %d"}


def use_color(stream, env):
    return "NO_COLOR" not in env and hasattr(stream, "isatty") and stream.isatty()


def result_json(store, s, score, stage, matches, every_word_known=True):
    """One search result as data (every field; the presets choose). Words the index does not have
    at all make no result "matchedAllTerms". Snippets are plain text with the offsets of their
    matches beside them ("highlights", "matchedHighlights"): search_json marks them for printing."""
    first = matches[0] if matches else {"snippet": fallback_snippet(store, s), "highlights": []}
    return {
        # "source" is the agent, as "agent" is (the field's first name, kept for compatibility: it is
        # not a configured source).
        "sessionId": s["session_id"], "shortId": short_id(store, s["session_id"], s["id"]), "source": s["agent"],
        "agent": s["agent"], "path": s["path"],
        "cwd": s["cwd"], "name": s["name"], "title": session_title(store, s), "score": float("%.4g" % score),
        "matchedAllTerms": stage in ("words together", "all words") and every_word_known,
        "stage": stage,
        "matchedWords": sorted({w for m in matches for w in m.get("_words", ())}),
        "created": s["created"], "modified": s["modified"], "parent": s["parent"],
        "matchedSnippet": first["snippet"], "matchedHighlights": first["highlights"],
        "matches": [{k: v for k, v in m.items() if k != "_words"} for m in matches],
        "resumeCommand": resume_command(s),
        "fileDeleted": s["deleted"] is not None,
        "chunkCount": s["chunk_count"],
    }


# The JSON contract of a search result, by preset (--fields). "summary" is the default shape.
FIELD_PRESETS = {
    "minimal": ("sessionId", "shortId", "agent", "host", "name", "title", "modified", "score", "resumeCommand", "fileDeleted",
                "current"),
    "summary": ("sessionId", "shortId", "source", "agent", "host", "path", "cwd", "name", "title", "score", "matchedAllTerms", "created",
                "modified", "parent", "matchedSnippet", "matches", "resumeCommand", "fileDeleted", "current"),
}
FIELD_PRESETS["full"] = FIELD_PRESETS["summary"] + ("chunkCount", "stage", "matchedWords")
SUMMARY_MATCH_KEYS = ("seq", "kind", "tool", "snippet")  # "full" keeps every key of every match
FULL_MATCHES = 10


def parse_fields(spec):
    """--fields value -> (field names, whether matches are given in full)."""
    spec = (spec or "summary").strip()
    if spec in FIELD_PRESETS:
        return FIELD_PRESETS[spec], spec == "full"
    fields = tuple(f.strip() for f in spec.split(",") if f.strip())
    unknown = [f for f in fields if f not in FIELD_PRESETS["full"]]
    if unknown or not fields:
        raise UsageError("unknown field%s %s for --fields; use minimal, summary, full or a comma-separated list of: %s"
                         % ("s" if len(unknown) > 1 else "", ", ".join(unknown) or "(none)", ", ".join(FIELD_PRESETS["full"])))
    return fields, False


def shape_result(r, fields, full):
    """The fields asked for of a result (its snippets keep their highlights, for search_json)."""
    out = {k: r[k] for k in fields}
    if "matchedSnippet" in out:
        out["matchedHighlights"] = r["matchedHighlights"]
    if "matches" in out and not full:
        out["matches"] = [{k: m[k] for k in SUMMARY_MATCH_KEYS + ("highlights",)} for m in out["matches"][:MATCHES_PER_SESSION]]
    return out


def marked(text, highlights):
    """A snippet with its matches marked **like this**, as the JSON and the text output show it."""
    out, pos = [], 0
    for start, end in highlights:
        out += [text[pos:start], HL_OPEN, text[start:end], HL_CLOSE]
        pos = end
    return "".join(out) + text[pos:] if out else text


def _marked_match(m):
    return {k: marked(v, m["highlights"]) if k == "snippet" and v else v for k, v in m.items() if k != "highlights"}


def search_json(data):
    """A search's data (search_request) as Sesame prints it and the MCP server returns it: snippets
    marked (marked), without their offsets. A new object (fit_budget may cut it); `data` stays as it is."""
    out = dict(data, results=[{k: marked(v, r.get("matchedHighlights") or ()) if k == "matchedSnippet" and v else
                               [_marked_match(m) for m in v] if k == "matches" else v
                               for k, v in r.items() if k != "matchedHighlights"} for r in data["results"]])
    if data.get("truncated"):
        out["truncated"] = dict(data["truncated"])
    return out


def shorten_snippet(snippet, width):
    """Cut a snippet to about `width` characters around its first match, keeping ** pairs whole."""
    if not snippet or len(snippet) <= width:
        return snippet
    if width <= 0:
        return "…"
    first = max(0, snippet.find(HL_OPEN))
    lo = max(0, min(first - width // 4, len(snippet) - width))
    cut = snippet[lo:lo + width]
    if cut.count(HL_OPEN) % 2:
        cut = cut.rsplit(HL_OPEN, 1)[0]
    return ("…" if lo > 0 else "") + cut.strip() + "…"


# What fit_budget shortens snippets to, in turn, before it drops results: a result whose snippets
# say nothing is worth less than one result fewer. 0 (no snippet text) only for a lone result.
SNIPPET_WIDTHS = (120, 60)


def _shortened(data, width):
    for r in data["results"]:
        if r.get("matchedSnippet"):
            r["matchedSnippet"] = shorten_snippet(r["matchedSnippet"], width)
        for m in r.get("matches") or []:
            if m.get("snippet"):
                m["snippet"] = shorten_snippet(m["snippet"], width)
    return data


def fit_budget(data, max_chars, render):
    """Render `data` within max_chars: shorten snippets first (not below SNIPPET_WIDTHS[-1]), then
    drop the lowest-ranked results, and say in the output what was left out (data["truncated"];
    paging fields point past it). The first result always stays, cut as far as it goes, so that
    paging with any budget moves on."""
    text = render(data)
    if not max_chars or len(text) <= max_chars:
        return text
    results = data["results"]
    note = data.setdefault("truncated", {"maxChars": max_chars, "droppedResults": 0, "snippetsShortenedTo": None,
                                         "overBudget": False})
    for width in SNIPPET_WIDTHS:
        note["snippetsShortenedTo"] = width
        text = render(_shortened(data, width))
        if len(text) <= max_chars:
            return text
    while len(results) > 1:
        results.pop()
        note["droppedResults"] += 1
        data["resultCount"] = len(results)
        data["hasMore"] = True
        data["nextOffset"] = data["offset"] + len(results)
        text = render(data)
        if len(text) <= max_chars:
            return text
    note["snippetsShortenedTo"] = 0
    text = render(_shortened(data, 0))
    if len(text) <= max_chars:
        return text
    note["overBudget"] = True  # even one result is longer: it is shown all the same
    return render(data)


def short_date(ts):
    return ts[:16].replace("T", " ") + " UTC" if ts else "unknown date"


def print_results(data, color, out, words=None):
    """Human search output: a count line, then per session its rank, id, name, date, cwd, snippet."""
    words = words or CLI_WORDS
    results = data["results"]
    out.write('Found %d session%s matching "%s"\n' % (len(results), "" if len(results) == 1 else "s",
                                                      visible(data["query"])))
    for note in data.get("alsoSearched") or ():
        out.write(visible("(%s)\n" % (("also searched %s for %s" % (", ".join(note["searched"]), note["word"]))
                                      if note["searched"] else "%s: %s, left out" % (note["word"], note["why"]))))
    # A paraphrase shares few words with its session ("images load slowly" for a session about WebP
    # thumbnails): when no session has every word, the words were likely not the session's own.
    if data["offset"] == 0 and all(r.get("matchedAllTerms") is False for r in results):
        out.write("(no session has %s of these words: try the words the session would have used, "
                  "such as library, tool or file names, or the error text)\n" % ("all" if results else "any"))
    for rank, r in enumerate(results, data["offset"] + 1):
        # The rank, not the score: bm25 scores mean little to a reader (and round to 0.00 in a small index).
        out.write(visible("\n%d. %s (%s)%s - %s%s\n" % (
            rank, escape_breaks(r.get("shortId") or r.get("sessionId")), escape_breaks(r.get("title") or r.get("name") or "Unnamed"),
            " [%s]" % r["host"] if r.get("host") else "",
            short_date(r.get("modified")),
            " (file deleted)" if r.get("fileDeleted") else " (this session)" if r.get("current") else "")))
        if "cwd" in r:
            out.write("  %s\n" % visible(escape_breaks(r["cwd"]) or "(no working directory)"))
        if r.get("matchedSnippet"):
            out.write("  %s\n" % highlight(visible(r["matchedSnippet"]), color))
    cut = data.get("truncated")
    if cut:
        out.write("\n(output limited to %d characters: %s%s%s)\n" % (
            cut["maxChars"], "%d lower-ranked results left out, " % cut["droppedResults"] if cut["droppedResults"] else "",
            "snippets shortened" if cut["snippetsShortenedTo"] is not None else "",
            "; one result is always shown" if cut.get("overBudget") else ""))
    if data["hasMore"]:
        out.write("\n(more results: %s)\n" % (words["offset"] % data["nextOffset"]))


def render_results(data, color=False):
    """print_results as a string."""
    buf = io.StringIO()
    print_results(data, color, buf)
    return buf.getvalue()


def highlight(snippet, color):
    """Snippets mark matches **like this**; on a terminal that becomes colour."""
    return re.sub(r"\*\*(.+?)\*\*", "\x1b[1;33m\\1\x1b[0m", snippet) if color else snippet


_JSON_UNSAFE = LazyPattern("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # json.dumps escapes only C0 controls


def to_json(obj):
    """The one JSON form Sesame prints: one line, keys in a fixed order, so output is byte-stable.
    Every control character is escaped (C0 by json, C1 and bidirectional overrides here)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return _JSON_UNSAFE.sub(lambda m: "\\u%04x" % ord(m.group()), text) if _JSON_UNSAFE.search(text) else text


def emit_json(obj, out=None):
    (out or sys.stdout).write(to_json(obj) + "\n")


def status_text(info):
    """What `sesame status` prints, from status_request() (so the MCP tool does not compute it twice)."""
    out = ["index:    %s%s" % (info["indexPath"], "" if info["indexExists"] else " (not built yet: run sesame index)")]
    if info["indexExists"]:
        out.append("size:     %.1f MB, %d sessions, %d chunks from %d files"
                   % (info["indexBytes"] / 1e6, info["sessions"], info["chunks"], info["files"]))
        out += ["          %-11s %6d %-8s %9d %s%s" % (
            p["agent"], p["sessions"], _plural(p["sessions"], "session"), p["chunks"], _plural(p["chunks"], "chunk"),
            "  (%d kept from deleted files)" % p["deletedKept"] if p["deletedKept"] else "") for p in info["perAgent"]]
        out.append("updated:  %s (%d session files changed since)" % (info["lastIndex"] or "never", info["changedSinceLastIndex"]))
        if info.get("readAgain"):
            out.append("upgrade:  %d session %s indexed by an earlier version of Sesame, read again a few at each search "
                       "(sesame index: all now)" % (info["readAgain"], _plural(info["readAgain"], "file")))
        if info.get("mergeDue"):
            out.append("merge:    the full-text index holds text it replaced, merged out a step at a time "
                       "(sesame index: all now)")
        for p in info["perAgent"]:
            unknown = p.get("unrecognizedRecords")
            if unknown:
                versions = _list(p.get("versionsSeen"))
                out.append("drift:    %s: %d %s of %d unknown %s (%s)%s%s" % (
                    p["agent"], sum(unknown.values()), _plural(sum(unknown.values()), "record"), len(unknown),
                    _plural(len(unknown), "type"), ", ".join(sorted(unknown)[:5]),
                    " from %s" % ", ".join(versions[-3:]) if versions else "",
                    "; Sesame was checked against %s" % p["verified"] if p.get("verified") else ""))
        for p in info["perAgent"]:
            if p.get("retention"):
                out.append("keeps:    %s deletes transcripts after %s days (%s); Sesame keeps what it indexed%s" % (
                    p["agent"], p["retention"]["days"], p["retention"]["setting"],
                    "" if info.get("keepDeletedSessions", True) else " only while the files exist (keepDeletedSessions)"))
        if info["notIndexed"]:
            states = collections.Counter(f["state"] for f in info["notIndexed"])
            out.append("skipped:  %d files not indexed (%s); sesame status --json lists them with the reason" % (
                info["filesNotIndexed"], ", ".join("%d %s" % (n, k) for k, n in sorted(states.items()))))
            out += ["          %s %s: %s" % (f["state"], escape_breaks(f["path"]), escape_breaks(f["reason"])) for f in info["notIndexed"]
                    if f["state"] != "skipped"][:10]
    out.append("config:   %s%s" % (info["configPath"], "" if info["configFound"] else " (none: using discovered sources)"))
    out += ["warning:  %s" % w for w in info.get("warnings") or ()]
    out += ["remote:   %s (%s): last sync %s%s" % (r["name"], r["host"], r["lastSync"] or "never",
                                                  "; last attempt %s failed: %s" % (r["lastAttempt"], r["error"]) if r["error"] else "")
            for r in info.get("remotes") or ()]
    out += ["source:   %-11s %s (%s)" % (s["parser"], escape_breaks(s["path"]), s["origin"]) for s in info["sources"]]
    if not info["sources"]:
        out.append("source:   none found (configure one in %s)" % info["configPath"])
    out.append("sqlite:   %s, sesame %s, schema %d" % (info["sqliteVersion"], info["sesameVersion"], info["schemaVersion"]))
    return visible("\n".join(out) + "\n")  # file names and reasons come from the disk


# ==================================================================================================
# Show: one session as readable text or JSON
# ==================================================================================================

SHOW_CONTEXT = 3              # chunks on each side of --around SEQ
SHOW_JSON_MAX_CHARS = 20000   # --json and MCP are read by agents: bounded unless asked otherwise
CANDIDATES_SHOWN = 10         # an ambiguous reference lists at most this many sessions
MAX_REF_CHARS = 4096          # longer than any session id, file path or name (SQLite's LIKE stops at 50,000)
CUT_MARK = " […cut]"
# Kinds shown as one line unless expanded: a tool call's output or the model's thinking can be
# pages long and is rarely what one reads a session for (--tools expands tool calls, --all all three).
COLLAPSIBLE = ("tool", "thinking", "context")


def _name_matches(store, ref):
    """The resolution rules on session names: exact (case-insensitive), then fuzzy."""
    named = store.named_sessions()
    key = " ".join(ref.split()).casefold()
    yield [r for r in named if " ".join(r["name"].split()).casefold() == key]
    words = re.findall(r"\w+", key)
    fuzzy = [r for r in named if words and all(w in r["name"].casefold() for w in words)]
    if not fuzzy:  # no name has every word: fall back to names that look alike (typos)
        import difflib
        close = set(difflib.get_close_matches(key, [r["name"].casefold() for r in named], n=CANDIDATES_SHOWN, cutoff=0.6))
        fuzzy = [r for r in named if r["name"].casefold() in close]
    yield fuzzy


def resolve_session(store, ref, any_copy=False):
    """The session REF names: a file path, an exact id, a unique id prefix, an exact name, a fuzzy name.

    The rules are tried in that order and the first that picks exactly one session wins; when none
    does, the first that found several is reported as ambiguous (SesameError kind "ambiguous").
    Sessions that share one id (see COPY_MARK) are several unless REF ends in "~N", the short id
    search printed for one of them; `any_copy` takes the newest of them instead (forget, which
    forgets every copy, needs only one).
    """
    ref = ref.strip()
    if len(ref) > MAX_REF_CHARS:
        raise SesameError('no session matches "%s" (%d characters: longer than any session id, file or name)'
                          % (_one_line(ref, 40), len(ref)), kind="not_found",
                          hint="give a session id, an id prefix, a session file or a name")
    copy = _COPY_REF_RE.match(ref)
    base = copy.group(1) if copy and not store.sessions_with_id(ref) else ref

    def stages():
        if os.sep in ref or os.path.exists(ref):
            paths = {os.path.abspath(os.path.expanduser(ref)), os.path.realpath(os.path.expanduser(ref))}
            yield store.sessions_in(list(paths))
        yield store.sessions_with_id(base)
        yield store.sessions_with_id_prefix(base)
        if base == ref:
            yield from _name_matches(store, ref)

    several = None
    for found in stages() if ref else ():
        ids = {r["session_id"] for r in found}
        if len(ids) == 1 and base != ref:   # "<id>~N": the Nth of the sessions with that id
            same = store.same_id_rows(ids.pop())
            n = int(copy.group(2))
            if n <= len(same):
                return next(r for r in found if r["id"] == same[n - 1])
            raise SesameError('no session matches "%s" (%d with that id)' % (ref, len(same)), kind="not_found",
                              hint="give the short id search printed, the full id or the session file")
        if len(found) == 1 or (found and any_copy and len(ids) == 1):
            return found[0]
        several = several or found
    if not several:
        raise SesameError('no session matches "%s"' % ref, kind="not_found",
                          hint="give a session id, an id prefix, a session file or a name; "
                               "`sesame search WORDS` finds sessions by topic")
    shared = collections.Counter(r["session_id"] for r in several)
    lines = ["  %s  %s  %s  %s%s" % (short_id(store, r["session_id"], r["id"]) if shared[r["session_id"]] > 1 else
                                     r["session_id"], r["name"] or "Unnamed", short_date(r["modified"]),
                                     r["cwd"] or "(no working directory)",
                                     "  " + r["path"] if shared[r["session_id"]] > 1 else "")
             for r in several[:CANDIDATES_SHOWN]]
    if len(several) > CANDIDATES_SHOWN:
        lines.append("  … and %d more" % (len(several) - CANDIDATES_SHOWN))
    raise SesameError('"%s" matches %d sessions:\n%s' % (ref, len(several), "\n".join(lines)), kind="ambiguous",
                      hint="give more of the id, the id with its ~N as search prints it, or the session file")


def session_header(s):
    return {"sessionId": s["session_id"], "shortId": s.get("short_id"), "agent": s["agent"], "host": None,
            "name": s["name"], "title": s.get("title"),
            "cwd": s["cwd"],
            "created": s["created"], "modified": s["modified"], "path": s["path"], "parent": s["parent"],
            "resumeCommand": resume_command(s), "fileDeleted": s["deleted"] is not None,
            "summary": s.get("summary"),  # the agent's own summary of the session (pi's sessions-meta)
            "chunkCount": s["chunk_count"]}


def collapse(kind, text):
    """The one line a collapsed chunk is shown as: a tool call's first argument, or a first line."""
    if kind == "tool":
        # tool_text() layout: "tool: NAME", then "key: value" argument lines, then "output:"/"error:".
        lines = text.split("\n")
        first = lines[1] if len(lines) > 1 and lines[1] not in ("output:", "error:") else ""
        first = first.split(": ", 1)[1] if re.match(r"\w+: ", first) else first or "\n".join(lines[2:])  # no arguments: its output
        return (_one_line(first, 120) or "") + (" (error)" if "error:" in lines else "")
    return _one_line(text, 120) or ""


def _window(costs, center, budget):
    """The range (lo, hi) of chunks around `center` that fits the budget, grown one chunk at a time
    on each side in turn, so that --around SEQ keeps SEQ and its nearest neighbours; None when even
    `center` does not fit."""
    if costs[center] > budget:
        return None
    lo = hi = center
    used, grow_before, grow_after = costs[center], True, True
    while grow_before or grow_after:
        if grow_after:
            grow_after = hi + 1 < len(costs) and used + costs[hi + 1] <= budget
            if grow_after:
                hi, used = hi + 1, used + costs[hi + 1]
        if grow_before:
            grow_before = lo > 0 and used + costs[lo - 1] <= budget
            if grow_before:
                lo, used = lo - 1, used + costs[lo - 1]
    return lo, hi


def _center(data):
    seqs = [c["seq"] for c in data["chunks"]]
    return seqs.index(data["around"]) if data["around"] in seqs else 0


def _bounded(data, costs, budget, cut):
    """`data` with only the chunks that fit; cut(chunk, room) shortens a chunk too big to show alone."""
    chunks, om = data["chunks"], data["omitted"]
    if not chunks:
        return data
    center = _center(data)
    span = _window(costs, center, budget)
    if span:
        lo, hi = span
        kept, cut_seq = chunks[lo:hi + 1], None
    else:  # the chunk asked for is bigger than the whole budget: show as much of it as fits
        lo = hi = center
        kept, cut_seq = [cut(chunks[center], budget)], chunks[center]["seq"]
    return dict(data, chunks=kept, truncated=True,
                omitted=dict(om, before=om["before"] + lo, after=om["after"] + len(chunks) - 1 - hi, cutSeq=cut_seq))


def _json_size(obj):
    return len(json.dumps(obj, ensure_ascii=False, indent=2)) + 1  # as emit_json prints it


def bound_json(data, max_chars):
    """`data` cut to at most max_chars as emit_json prints it (0: no limit); says what was left out."""
    if not max_chars or _json_size(data) <= max_chars:
        return data
    # Size of the object with no chunks and the widest omitted counts; then what each chunk adds at
    # its depth (indent 2 inside "chunks": 4 more spaces per line, plus separators).
    n = len(data["chunks"]) + data["omitted"]["before"] + data["omitted"]["after"]
    base = _json_size(dict(data, chunks=[], truncated=True,
                           omitted=dict(data["omitted"], before=n, after=n, cutSeq=n)))
    if base > max_chars:
        raise UsageError("--max-chars %d is too small for this session's header (it needs %d)" % (max_chars, base))

    def cost(c):
        d = json.dumps(c, ensure_ascii=False, indent=2)
        return len(d) + 4 * d.count("\n") + 8

    def cut(c, room):
        keep = len(c["text"])
        while keep > 0:
            short = dict(c, text=c["text"][:keep] + CUT_MARK)
            over = cost(short) - room
            if over <= 0:
                return short
            keep -= over  # escapes make a character cost 1 to 6: converges in a few steps
        return dict(c, text=CUT_MARK.strip())

    out = _bounded(data, [cost(c) for c in data["chunks"]], max_chars - base, cut)
    while _json_size(out) > max_chars and len(out["chunks"]) > 1:  # safety net; the estimate is an upper bound
        out["chunks"].pop()
        out["omitted"]["after"] += 1
    return out


def _when(ts):
    return ts[:16].replace("T", " ") + " " if ts else ""


def chunk_block(c, color=False, collapsed=False):
    """One chunk as text: `[seq] date who:` then the text, or all on one line when collapsed."""
    who = {"tool": "tool %s" % (c["tool"] or ""), "summary": "summary (%s)" % (c["role"] or "summary")}.get(
        c["kind"], c["kind"])
    head = visible("[%d] %s%s:" % (c["seq"], _when(c["timestamp"]), who.strip()))
    text = visible(c["text"])
    if c["kind"] == "tool" and text.startswith("tool: %s\n" % visible(c["tool"])):
        text = text.split("\n", 1)[1]  # the head already names the tool
    block = "%s %s\n" % (head, text) if collapsed else "%s\n%s\n\n" % (head, text)
    if color and c["kind"] in ("thinking", "context"):
        block = "\x1b[2m%s\x1b[0m" % block  # the model's asides, dimmed: present but not the conversation
    return block


def header_text(h):
    rows = [("session", h["sessionId"]), ("agent", h["agent"]), ("name", h["name"] or "Unnamed"),
            ("host", h.get("host")), ("cwd", h["cwd"] or "-"), ("created", short_date(h["created"])), ("modified", short_date(h["modified"])),
            ("path", (h["path"] or "-") + (" (file deleted: shown from the index)" if h.get("fileDeleted") else "")),
            ("parent", h["parent"] or "-"), ("resume", h["resumeCommand"] or "-"),
            ("summary", h["summary"]), ("chunks", h["chunkCount"])]
    return "".join("%-9s %s\n" % (k + ":", visible(v if k == "summary" else escape_breaks(v)))
                   for k, v in rows if v is not None) + "\n"


def _count_seqs(n, first):
    """"3 chunks (seq 4-6)", "1 chunk (seq 4)"."""
    return "%d chunk%s (seq %s)" % (n, "" if n == 1 else "s", first if n == 1 else "%d-%d" % (first, first + n - 1))


def show_text(data, color=False, max_chars=0, words=CLI_WORDS):
    """The human output of `sesame show`, at most max_chars long (0: no limit)."""
    def block(c):
        return chunk_block(c, color, c["collapsed"])

    head = header_text(data["session"])
    if max_chars:
        n = data["session"]["chunkCount"] or 0  # the widest "… N chunks" notes, kept room for
        notes = "… %s not shown\n\n… %s not shown (use %s or a larger %s)\n" % (
            _count_seqs(n, n), _count_seqs(n, n), words["around"], words["max_chars"])
        budget = max_chars - len(head) - len(notes)
        costs = [len(block(c)) for c in data["chunks"]]
        if sum(costs) > budget:
            data = _bounded(data, costs, max(budget, 0),
                            lambda c, room: dict(c, text=c["text"][:max(room - len(block(dict(c, text=""))) - len(CUT_MARK), 0)] + CUT_MARK))
    om, chunks = data["omitted"], data["chunks"]
    parts = [head]
    if om["before"]:
        parts.append("… %s not shown\n\n" % _count_seqs(om["before"], 0))
    parts.extend(block(c) for c in chunks)
    if om["after"]:
        first = chunks[-1]["seq"] + 1 if chunks else om["before"]
        parts.append("… %s not shown (use %s%s)\n" % (
            _count_seqs(om["after"], first), words["around"], " or a larger " + words["max_chars"] if data["truncated"] else ""))
    text = "".join(parts)
    return text[:max_chars] if max_chars else text  # a header longer than the limit: still never over it


# ==================================================================================================
# Application: what every front end does (refresh, options, one request per command)
# ==================================================================================================

# The front ends (the command line, the MCP server) call these and only these: a command's request
# function, with a Context (the environment, the config, the sources) and its options as `params`,
# returns plain data; the CLI prints it, the MCP server returns it as a tool result.


class Context:
    """What every command needs: the environment's paths, the config and the sources. What the config
    gets wrong but can be gone on from is in `warnings`, each also told to `warn` (stderr by default)."""

    def __init__(self, env=None, warn=None):
        self.env = os.environ if env is None else env
        self.index_path = index_path(self.env)
        self.cfg, self.cfg_path = load_config(self.env)
        self.warnings = []

        def note(message):
            self.warnings.append(message)
            (warn or _warn)(message)
        self.sources = resolve_sources(self.cfg, self.cfg_path, self.env, note)
        self.remotes = load_remotes(self.env)   # other machines' sessions: their mirrors are sources too
        self.sources += remote_sources(self.env, self.remotes)
        exclude, redact_secrets = self.cfg.get("exclude", []), self.cfg.get("redact", True)
        if not isinstance(exclude, list) or not set(map(type, exclude)) <= {str} or not all(map(str.strip, exclude)):
            raise ConfigError('%s: "exclude" must be a list of path patterns (non-empty strings)' % self.cfg_path)
        if not isinstance(redact_secrets, bool):
            raise ConfigError('%s: "redact" must be true or false' % self.cfg_path)
        keep_deleted = self.cfg.get("keepDeletedSessions", True)
        if not isinstance(keep_deleted, bool):
            raise ConfigError('%s: "keepDeletedSessions" must be true or false' % self.cfg_path)
        self.policy = Policy(exclude, redact_secrets, load_forgotten(self.env), keep_deleted)
        # Set by the MCP server for its calls (see WarmIndex): the index it keeps open, and whether
        # a search's refresh sweeps a share of the old files (the server compares them all instead).
        self.kept, self.sweep = None, True

    def store(self, create=True):
        if self.kept is not None:
            return self.kept
        return Store.open(self.index_path, create=create)


def _progress_printer(stream):
    """A one-line progress display for terminals: files, MB/s, time left."""
    def show(done, total, done_bytes, total_bytes, elapsed):
        rate = done_bytes / elapsed / 1e6 if elapsed > 0 else 0.0
        left = (total_bytes - done_bytes) / (done_bytes / elapsed) if done_bytes and elapsed > 0 else 0
        stream.write("\rindexing: %d/%d files, %.1f MB/s, %ds left   " % (done, total, rate, left))
        stream.flush()

    def merging(elapsed):   # (merge_index: seconds at 1 GB after an upgrade)
        stream.write("\rmerging replaced text out of the full-text index: %ds   " % elapsed)
        stream.flush()
    show.merging = merging
    return show


FIRST_INDEX_WAIT = 60  # seconds a search waits for another process that builds the first index


def refresh_before_reading(ctx, store, first_use):
    """What search and show do first: bring the index up to date, without ever failing the read.

    The first use says it is building the index (with progress on a terminal); a busy indexer or an
    index that cannot be written (full disk, read-only) leaves the index as it is, with a note.
    """
    if not ctx.sources:
        if not ctx.warnings:  # else they said why (configured folders that do not exist)
            _stderr("sesame: no agent sessions found in their usual places; `sesame sources` shows where it "
                    "looks, %s can name others" % config_path(ctx.env))
        return
    if store.readonly:
        _stderr("sesame: the index %s cannot be written; using it as it is" % store.path)
        return
    progress = None
    if first_use:
        _stderr("sesame: building the index for the first time (sesame status shows what it covers)")
        progress = _progress_printer(sys.stderr) if sys.stderr.isatty() else None
    try:
        summary = refresh_index(ctx, store, wait_seconds=0, progress=progress, quick=not first_use)
    except sqlite3.DatabaseError as e:  # full disk, read-only or damaged index: what is there still answers
        _stderr("sesame: cannot update the index (%s); using it as it is" % e)
        return
    except StoreError as e:  # the lock file cannot be created (a read-only data directory)
        _stderr("sesame: cannot update the index (%s); using it as it is" % e.message)
        return
    finally:
        if progress:
            sys.stderr.write("\r\x1b[K")
    if summary is None and store.meta("built") is None:
        # Another process is building the very first index: what is there so far is partial.
        n = store.session_count()
        _stderr("sesame: another sesame process is building the index (%d sessions so far); waiting up to %ds"
                % (n, FIRST_INDEX_WAIT))
        summary = refresh_index(ctx, store, wait_seconds=FIRST_INDEX_WAIT, quick=True)
        if summary is None:
            _stderr("sesame: the index is still being built; these results are partial")
    elif summary is None:
        _stderr("sesame: another sesame index is running; using the index as it is")
    elif first_use:
        _stderr("sesame: " + summary.line())
    elif summary.deferred and ctx.sweep:   # (the MCP server's background refresh reads them: see REREAD_BYTES)
        left = store.version_stale_rows(parser_versions())
        _stderr("sesame: %d session %s indexed by an earlier version of Sesame %s read again a few at each search; "
                "`sesame index` reads %s now" % (left, "file" if left == 1 else "files", "is" if left == 1 else "are",
                                                 "it" if left == 1 else "them all"))


BUSY_LOCK_WAIT = 1.0   # seconds a search that has something to read waits for another indexer
CALL_LOCK_WAIT = 0.25  # the same for an MCP call (warm: it answers from the index as it is after that)
LEND_WAIT = 0.05       # seconds a search waits for a background run to lend it its turn
LEND_FILES = 256       # files a lending run compares between two offers (~3 ms)
BACKGROUND_TURN_WAIT = 1.0   # seconds a background run waits for the calls in their turn


class _RunGuard:
    """Index runs in one process take turns: they share the parsers' caches of the disk.

    A server's background refresh (MCP, the page) compares every file every few seconds (~0.1 s at
    1 GB, without the index lock) and reads those that changed under it (minutes after an upgrade).
    It lends its turn (with its index lock once it holds it, `locked`; before, the search takes the
    lock itself) to a search that waits for it (lent), at safe points: between
    two files it compares (plan_full), and between two files it reads, what it wrote so far
    committed (_lending_results). A call then does not skip its own refresh for it, and waits at
    most LEND_WAIT (a file being read). The files the paused run found changed may be read by the
    search first: the run then reads them on from where the search stopped, or not at all."""

    def __init__(self):
        import _thread
        self._ident = _thread.get_ident
        self.turn, self._count = _thread.allocate_lock(), _thread.allocate_lock()
        self.waiting = 0        # searches waiting for their turn, or in it
        self.lender = None      # the thread whose run lends its turn (see pause)
        self.pausable = False   # a lending run holds the turn: searches wait for it (LEND_WAIT)
        self.lent = False       # the turn was lent: its run is paused
        self.locked = False     # the lending run holds the index lock (a search it lends to runs under it)
        self.lends = 0          # how many times it was
        self.background = False  # this process runs a background refresh (_keep_fresh)

    def enter(self, timeout, search, lend=False):
        """Take the turn, waiting up to `timeout`. A run that lends (`lend`) is lendable from the
        moment it asks: queued behind a call, it takes the turn as that call leaves, and a call
        right after must wait for it (LEND_WAIT), not find the turn taken and skip its refresh."""
        if search:
            with self._count:
                self.waiting += 1
        if lend:
            self.lender, self.pausable = self._ident(), True
        ok = self.turn.acquire(timeout=timeout) if timeout > 0 else self.turn.acquire(False)
        if not ok:
            self._left(search, lend)
        return ok

    def leave(self, search, lend=False):
        self.turn.release()
        self._left(search, lend)

    def _left(self, search, lend):
        if search:
            with self._count:
                self.waiting -= 1
        if lend:
            self.lender, self.pausable = None, False

    def aside(self, work):
        """Run work that needs neither the turn nor the index's write lock with the turn lent, so
        that a search that comes meanwhile runs at once (see merge_index)."""
        if self.lender != self._ident():
            return work()
        self.lent, self.lends = True, self.lends + 1
        self.turn.release()
        try:
            return work()
        finally:
            self.turn.acquire()
            self.lent = False

    def pause(self):
        """Lend the turn to the searches that wait for it, until none is left (a safe point)."""
        if self.waiting and self.lender == self._ident():
            self.aside(self._searches_done)

    def _searches_done(self):
        while self.waiting:
            time.sleep(0.0005)


_RUN_GUARD = None


def _lending():
    """The _RunGuard when this thread's run lends its turn (a server's background refresh), else None."""
    guard = _RUN_GUARD
    return guard if guard is not None and guard.lender == guard._ident() else None


def _run_guard():
    global _RUN_GUARD
    if _RUN_GUARD is None:
        _RUN_GUARD = _RunGuard()
    return _RUN_GUARD


def _looked_file(store):
    return os.path.join(os.path.dirname(store.path), "looked")


def _look_mark(ctx):
    """What a round that compared every file looked at: the sources (parsers' versions included) and
    the settings that decide what is indexed."""
    return sources_key(ctx.sources) + "\n" + ctx.policy.fingerprint()


def _looked_lately(ctx, store, every):
    """Whether another process's round compared every file of the same sources, and read what it
    found, less than `every` seconds ago (see refresh_index)."""
    path = _looked_file(store)
    try:
        # (a time ahead of now is a clock set back since, or another machine's on a shared disk:
        # trusted, it would skip every round until then; a file server's clock may run a little ahead)
        if not -2 <= time.time() - os.stat(path).st_mtime < every:
            return False
        with open(path, encoding="utf-8") as f:
            mark, _, pid = f.read().rpartition("\n")
        return mark == _look_mark(ctx) and pid != str(os.getpid())
    except (OSError, ValueError):
        return False


def _note_look(ctx, store):
    try:
        write_private(_looked_file(store), "%s\n%d" % (_look_mark(ctx), os.getpid()))
    except OSError:
        pass   # (a read-only or full data folder: the next round looks again)


def refresh_index(ctx, store, wait_seconds, progress=None, full=False, quick=False, lend=False, merge_seconds=None,
                  every=None):
    """Run the indexer under the lock; None when another indexer holds it past wait_seconds.
    `quick` looks at the disk by the freshness rules (what searches do), else at every file.
    `lend`: a background run, which lends its turn to searches (_RunGuard).
    `merge_seconds`: for a run that is not a search, as run_index's (a search spends at most
    COMPACT_SEARCH_SECONDS, none in a process whose background refresh does it).
    `every`: a round repeated every that many seconds (a server's background, `watch`): skipped when
    another process's round compared every file since (an agent runs one MCP server per session:
    each compared every file, 0.13 s of CPU at 1 GB, and all at once once they held no lock to look).

    Another process's indexer holds the lock while it reads (`sesame index`; `sesame watch` and an
    MCP server's background refresh once their look found something). A quick refresh that finds it held
    looks anyway, without writing: nothing to read, and the index is as fresh as the rules can
    tell; something to read (a message just appended), and it waits up to BUSY_LOCK_WAIT for the
    lock and reads it, rather than answer without it (an MCP call, CALL_LOCK_WAIT: it stays warm)."""
    guard = _run_guard()
    search = quick and not lend
    # (A background run waits for a call in its turn rather than skip its round: the next is 30 s
    # away. The index lock it then takes without waiting: calls cannot have their turn meanwhile.)
    turn_wait = wait_seconds or (LEND_WAIT if search and guard.pausable else BACKGROUND_TURN_WAIT if lend else 0)
    if not guard.enter(turn_wait, search, lend):
        return None   # (another run of this process did not give way in time: the index as it is)
    try:
        if search:
            merge_seconds = 0 if guard.background or guard.lent else COMPACT_SEARCH_SECONDS
        kw = dict(full=full, progress=progress, policy=ctx.policy, quick=quick, cwd=_cwd() if quick else None,
                  sweep=ctx.sweep, merge_seconds=merge_seconds)
        if guard.lent and guard.locked:
            return run_index(store, ctx.sources, **kw)
        if not quick and not full:
            if every and _looked_lately(ctx, store, every * 0.9):
                return IndexSummary()
            return _full_round(ctx, store, guard, lend, wait_seconds, kw)
        lock = IndexLock(os.path.dirname(ctx.index_path))
        try:
            if not lock.acquire(wait_seconds):
                if not quick:
                    return None
                summary = run_index(store, ctx.sources, look_only=True, **kw)
                if summary is not None or not lock.acquire(BUSY_LOCK_WAIT if ctx.sweep else CALL_LOCK_WAIT):
                    return summary
            return run_index(store, ctx.sources, **kw)
        finally:
            lock.release()
    finally:
        guard.leave(search, lend)


def _full_round(ctx, store, guard, lend, wait_seconds, kw):
    """A run that compares every file (an MCP server's background refresh, `watch`, `sync`).

    It finds nothing to read nearly every time, and held the index lock while it compared (0.13 s
    at 1 GB, 0.7 s cold): another process's search that had an append to read waited for it, once
    per round of each server running (an agent runs one per session). It looks first without the
    lock (writing nothing, as a search does) and takes the lock only to read or write what the look
    found, each file looked at again (recheck_plan: a second look under the lock held it as long as
    before, longer with several servers looking). A merge of the full-text index, when due, runs
    after the lock is let go: it reads no file, each of its steps is a transaction of its own, and
    under the lock (4-5 s at 1 GB) every other process's search gave up its refresh."""
    merge_seconds = kw["merge_seconds"]
    kw = dict(kw, merge_seconds=0)
    lock, looked = IndexLock(os.path.dirname(ctx.index_path)), []
    summary = run_index(store, ctx.sources, look_only=True, looked=looked, **kw)
    if summary is None:
        if not lock.acquire(wait_seconds):
            return None
        try:
            guard.locked = guard.locked or lend   # (a call lent the turn meanwhile writes under this lock)
            summary = run_index(store, ctx.sources, planned=looked[0] if looked else None, **kw)
        finally:
            guard.locked = guard.locked and not lend
            lock.release()
    _note_look(ctx, store)
    merge_index(store, summary, merge_seconds, kw["progress"], yield_to=lock)
    return summary


def _cwd():
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under us
        return None


def _quiet(message):
    """A warn() that says nothing: the message is still in Context.warnings (status shows it)."""


def _keep_fresh(stop, interval, who="sesame mcp"):
    """A server's background refresh: every file checked every `interval` seconds until `stop` is set
    (as `sesame watch` does), so that each call's own quick refresh finds little to do. Runs in a
    thread: the indexer then parses in-process (see parse_all). Remotes are synced in the background
    too, every remoteSyncSeconds (RemoteSyncer), never holding up a call."""
    syncer = RemoteSyncer()
    _run_guard().background = True   # (the calls leave merging the full-text index to it: merge_index)
    while not stop.wait(interval):
        try:
            ctx = Context(warn=_quiet)
            syncer.poke(ctx)
            store = ctx.store()
            try:
                if not store.readonly:
                    refresh_index(ctx, store, wait_seconds=0, lend=True, every=interval)
            finally:
                store.close()
        except Exception as e:  # noqa: BLE001  (a broken config or a full disk: the calls say so)
            _stderr("%s: background refresh: %s" % (who, getattr(e, "message", e)))


# --------------------------------------------------------------------------------------------------
# Options: every command's, defined once. The command line parses them with argparse; any other
# front end (the MCP server) passes a JSON object of them, checked against the schema made from the
# same definitions (request_params). Either way a request function gets `params`: every option of
# its command by name (--max-chars is max_chars), defaults filled in.
# --------------------------------------------------------------------------------------------------

WATCH_INTERVAL = 5.0


def _add_json(p):
    p.add_argument("--json", action="store_true", help="print JSON on stdout")


def _search_arguments(s):
    s.add_argument("query", nargs="*", help='words, "exact phrase", prefix*, -excluded (after -- any word is a word)')
    s.add_argument("--limit", type=int, help="sessions to show (default %d)" % DEFAULT_LIMIT)
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
    s.add_argument("--fields", metavar="PRESET", help="JSON fields: minimal, summary (default), full, or a "
                                                      "comma-separated list of field names")
    s.add_argument("--max-chars", type=int, metavar="N", help="keep the output under N characters (default: %d "
                   "unless --limit is given; 0 = no limit)" % DEFAULT_MAX_CHARS)
    s.add_argument("--host", metavar="NAME", help="only sessions of this remote (sesame remote list), or of %r "
                                                  "(this machine)" % LOCAL_HOST)
    _add_json(s)


def _index_arguments(i):
    i.add_argument("--full", action="store_true", help="rebuild the index from scratch")
    _add_json(i)


def _watch_arguments(w):
    w.add_argument("--interval", type=float, default=WATCH_INTERVAL, metavar="SECONDS",
                   help="seconds between checks (default %g)" % WATCH_INTERVAL)


def _forget_arguments(fo):
    fo.add_argument("session", nargs="*", help="session id, id prefix, file or name (as for show)")
    fo.add_argument("--undo", action="store_true", help="index a forgotten session again (give its id)")
    fo.add_argument("--list", action="store_true", help="list the forgotten sessions")
    _add_json(fo)


EXPORT_OPTIONS = ("format", "output", "force")  # show's options that write files: for people, not MCP callers


def _show_arguments(sh):
    sh.add_argument("session", nargs="+", help="session id, unique id prefix, session file, or name")
    sh.add_argument("--around", type=int, metavar="SEQ", help="show the chunks around chunk SEQ (search's matches[].seq)")
    sh.add_argument("--context", type=int, default=SHOW_CONTEXT, metavar="K",
                    help="chunks on each side of --around (default %d)" % SHOW_CONTEXT)
    sh.add_argument("--max-chars", type=int, metavar="N",
                    help="print at most N characters (default: no limit; %d with --json; 0: no limit)" % SHOW_JSON_MAX_CHARS)
    sh.add_argument("--tools", action="store_true", help="show tool calls in full, not as one line")
    sh.add_argument("--all", action="store_true", help="show tool calls, thinking and injected context in full")
    sh.add_argument("--no-refresh", action="store_true", help="use the index as it is, without updating it")
    sh.add_argument("--format", choices=("markdown", "md", "html"), help="export the session as Markdown or as one "
                    "self-contained HTML file (tool calls and thinking collapsed)")
    sh.add_argument("--output", metavar="FILE", help="write the export to FILE (default: stdout)")
    sh.add_argument("--force", action="store_true", help="let --output replace an existing file")
    _add_json(sh)


def _serve_arguments(sv):
    sv.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    sv.add_argument("--open", metavar="QUERY", nargs="?", const="", help="open the page in the browser (searching QUERY)")



def _remote_arguments(r):
    r.add_argument("action", metavar="add|list|remove", help="add NAME, list, or remove NAME")
    r.add_argument("name", nargs="?", help="the remote's name (shown as [NAME] beside its sessions)")
    r.add_argument("--host", help="the ssh destination, as `ssh HOST` reaches it (default: NAME)")
    r.add_argument("--agents", metavar="A,B", help="only these agents' sessions (default: every agent)")
    r.add_argument("--projects", metavar="DIR,DIR", help="folders of projects on the remote (~/code): the "
                   "histories agents keep in each project (Aider, SpecStory, Crush) are copied too")
    _add_json(r)


def _sync_arguments(sy):
    sy.add_argument("names", nargs="*", metavar="NAME", help="the remotes to sync (default: all)")
    _add_json(sy)


def _setup_arguments(se):
    se.add_argument("agents", nargs="*", metavar="AGENT", help="the agents to wire in (see the list `sesame setup` prints)")
    se.add_argument("--all", action="store_true", help="every agent found")
    se.add_argument("--dry-run", action="store_true", help="print each change as a diff; change nothing")
    se.add_argument("--undo", action="store_true", help="take out what setup added (all, or these agents)")
    se.add_argument("--force", action="store_true", help="replace a `sesame` entry that runs something else")
    _add_json(se)


def _no_arguments(p):
    pass


class Command:
    """One entry of the command table (COMMANDS, with the command line at the end of the file).
    Everything a front end needs comes from it: the usage lists and `--help`, argparse's parser, the
    MCP server's tools.

    name, synopsis, summary: how the usage lists show it (`sesame NAME SYNOPSIS   SUMMARY`; the
        summary is also its line in `sesame --help`).
    options: a function that declares its options with add_argument calls (on an argparse parser or
        an _OptionList).
    request: request(ctx, params) -> data, the application's answer, for any front end: params from
        cli_params (argparse) or request_params (a JSON object). None: the command is a front end
        itself, like `watch` and `mcp`. (search_request also takes the caller's render, to fill a
        page within its budget; index_request a progress display.)
    cli: cli(args, ctx) -> exit code, what `sesame NAME` runs: it calls the request and prints its data.
    tool, mcp: the MCP tool's description (None: not a tool) and mcp(ctx, params) -> (text for the
        model, structuredContent), which calls the request and formats its data.
    context: whether the command line builds a Context before cli runs (the MCP server builds one per call).
    words: the positional words may look like options (`search -draft`): they are moved after `--`.
    quick: a plain command line of it is read without argparse (quick_args: search, for start-up).
    """

    def __init__(self, name, synopsis, summary, options, request, cli, tool=None, mcp=None, context=True,
                 words=False, quick=False):
        self.name, self.synopsis, self.summary, self.options = name, synopsis, summary, options
        self.request, self.cli, self.tool, self.mcp = request, cli, tool, mcp
        self.context, self.words, self.quick = context, words, quick


def usage_lines(commands, indent=2):
    """The usage list: one line per command, as `sesame` alone and the module docstring show it."""
    width = max(len(c.name + c.synopsis) for c in commands.values()) + 4
    return "".join("%ssesame %-*s %s\n" % (" " * indent, width, (c.name + " " + c.synopsis).strip(), c.summary)
                   for c in commands.values())


class _OptionList:
    """Takes a command's add_argument calls and keeps them: for quick_args, the MCP schema and the
    defaults of request_params, without importing argparse."""

    def __init__(self):
        self.options, self.positional = {}, None  # "--name" -> (dest, takes a value, type, append)
        self.defaults, self.schema = {}, {}       # dest -> default; dest -> JSON schema type, help (not --json)

    def add_argument(self, name, nargs=None, action=None, type=None, default=None, help=None, **_):
        dest = name.lstrip("-").replace("-", "_")
        if not name.startswith("-"):
            self.positional = dest
            default = []
            kind = "string"
        elif action == "store_true":
            default = False
            kind = "boolean"
        else:
            kind = "array" if action == "append" else {int: "integer", float: "number"}.get(type, "string")
        self.options[name] = (dest, action != "store_true", type or str, action == "append")
        self.defaults[dest] = default
        if dest != "json":  # a front end's choice of output, not an option of the request
            self.schema[dest] = (kind, help or "")


def option_list(command):
    """A command's options, read from its definition (command: a Command)."""
    spec = _OptionList()
    command.options(spec)
    return spec


def argument_parser(**kw):
    """An argparse parser that fails with a UsageError (one line, exit 2, with a did-you-mean)
    instead of printing usage and exiting, and that asks for the terminal's width only when help
    is printed (argparse asks, importing shutil, for every argument added)."""
    import argparse
    # Sesame speaks English; argparse would look for a translation catalogue on disk for each of
    # its strings (a dozen file checks, 2-3 ms of every start).
    argparse._ = str
    argparse.ngettext = lambda singular, plural, n: singular if n == 1 else plural

    class _ArgParser(argparse.ArgumentParser):
        def error(self, message):
            raise UsageError("%s%s (see: %s --help)" % (message, _did_you_mean(message, self), self.prog))

    class _Formatter(argparse.HelpFormatter):
        def __init__(self, prog):
            super().__init__(prog, width=78)

        def format_help(self):
            import shutil
            self._width = max(shutil.get_terminal_size().columns - 2, 40)
            return super().format_help()

    return _ArgParser(formatter_class=_Formatter, **kw)


def _did_you_mean(message, parser):
    """"; did you mean --limit?" for an argparse complaint about an option it does not know."""
    import difflib
    unknown = re.findall(r"(--?[\w-]+)", message.split(":", 1)[-1]) if "unrecognized" in message else []
    # argparse keeps the option names nowhere public; a subcommand's are in its own parser
    # (a subcommand's parser is among its action's choices, a dict; an option's choices are a list)
    parsers = [parser] + [sp for a in parser._actions if isinstance(getattr(a, "choices", None), dict)
                          for sp in a.choices.values() if hasattr(sp, "_actions")]
    known = [o for p in parsers for a in p._actions for o in a.option_strings]
    close = [(u, difflib.get_close_matches(u, known, 1)) for u in unknown]
    # An option of sesame itself given after the command (`sesame search --version`) is known, but
    # not there: say where it goes rather than "did you mean --version?"
    return "".join("; %s goes before the command (sesame %s)" % (u, u) if c[0] == u else "; did you mean %s?" % c[0]
                   for u, c in close if c)


def option_schema(command):
    """The JSON schema of a command's options (what an MCP tool takes): the positional words are one
    required string, --tool NAME (repeatable) an array, numbers at least 0; --json is left out."""
    spec = option_list(command)
    props, required = {}, []
    for dest, (kind, help_text) in spec.schema.items():
        if dest in EXPORT_OPTIONS:
            continue   # files and formats are the command line's: MCP callers get the data
        prop = {"type": kind}
        if kind == "array":
            prop["items"] = {"type": "string"}
        elif kind in ("integer", "number"):
            prop["minimum"] = 0
        prop["description"] = help_text.replace("--", "")
        if dest == "agent":
            prop["enum"] = list(PARSERS)
        if dest == spec.positional:
            required.append(dest)
        props[dest] = prop
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list}


def check_arguments(schema, args):
    """Enough JSON Schema to reject what a model gets wrong: unknown, missing or mistyped arguments."""
    for name in schema["required"]:
        if name not in args:
            raise UsageError("missing required argument %r" % name)
    for name, value in args.items():
        prop = schema["properties"].get(name)
        if prop is None:
            raise UsageError("unknown argument %r (known: %s)" % (name, ", ".join(schema["properties"]) or "none"))
        want = _JSON_TYPES[prop["type"]]
        if want is list and isinstance(value, str):
            value = [value]  # a lone string where a list of strings is expected: take it as a list of one
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))  # bool is an int in Python
        if not ok or (want is list and not all(isinstance(v, str) for v in value)):
            raise UsageError("argument %r must be %s" % (name, "an array of strings" if want is list else
                                                         "an integer" if prop["type"] == "integer" else "a " + prop["type"]))
        if prop["type"] in ("integer", "number") and value < prop.get("minimum", value):
            raise UsageError("argument %r must be at least %d" % (name, prop["minimum"]))
        if "enum" in prop and value not in prop["enum"]:
            raise UsageError("argument %r must be one of: %s" % (name, ", ".join(prop["enum"])))


def request_params(command, arguments):
    """A JSON object of options (an MCP call's arguments) as a request's params: checked against the
    command's schema, given as the command line would give them (the words as a list of one, a lone
    --tool as a list, numbers of the option's type) and every option left out at its default."""
    check_arguments(option_schema(command), arguments)
    spec = option_list(command)
    params = dict(spec.defaults)
    for dest, convert, append in ((d, t, a) for d, _, t, a in spec.options.values()):
        if dest not in arguments or dest == "json":
            continue
        value = arguments[dest]
        if dest == spec.positional or (append and isinstance(value, str)):
            value = [value]
        elif convert in (int, float):
            value = convert(value)
        params[dest] = value
    return params


def cli_params(args):
    """Parsed command-line arguments as a request's params."""
    return {k: v for k, v in vars(args).items() if k != "command"}


# --------------------------------------------------------------------------------------------------
# Requests: one per command. Each validates its params once, reads the environment only through
# ctx.env, and returns plain data (the JSON the CLI prints, with snippets as text and match offsets:
# search_json marks them); none changes its params. Front ends format what they return.
# --------------------------------------------------------------------------------------------------


def search_sessions(ctx, text, limit=DEFAULT_LIMIT, offset=0, refresh=True, cwd=None, after=None, before=None,
                    agent=None, tools=False, tool=None, path=None, fields=None, max_chars=0, render=None, host=None):
    """A search as data (search_request, after its checks, calls this).

    With max_chars and render (how the caller prints a page of search_json's form), results are built
    only while they can still fit: one that cannot, even with the shortest snippets, is left for the
    next page."""
    fields, full = parse_fields(fields)
    query = Query(text)
    if limit < 1 or offset < 0:
        raise UsageError("--limit must be at least 1 and --offset at least 0")
    filters = Filters(cwd=cwd, after=after, before=before, agent=agent, tools_only=tools, tool=tool, path=path,
                      current=current_sessions(ctx.env), host=host_filter(ctx.env, ctx.remotes, host))
    filters.mirrors = os.path.join(os.path.abspath(data_dir(ctx.env)), "remotes", "") if ctx.remotes else None
    first_use = not os.path.exists(ctx.index_path)
    store = ctx.store()
    data = {"query": query.text, "resultCount": 0, "offset": offset, "limit": limit, "hasMore": False,
            "nextOffset": None, "alsoSearched": [], "results": []}
    results, page = data["results"], {}
    try:
        if refresh:
            refresh_before_reading(ctx, store, first_use)
        for hit in search(store, query, filters, limit=limit, offset=offset,
                          matches=FULL_MATCHES if full else MATCHES_PER_SESSION, page=page):
            if hit is None:
                data["hasMore"] = True
                break
            data["alsoSearched"] = query.notes()
            r = place_session(ctx.env, ctx.remotes, hit[0], result_json(
                store, *hit, every_word_known=not any(w.dropped for w in query.words)))
            r["current"] = not r["host"] and (r["agent"], r["sessionId"]) in filters.current
            results.append(shape_result(r, fields, full))
            if max_chars and render and len(results) > 1 and _smallest_size(data, render) > max_chars:
                results.pop()  # it cannot fit (fit_budget would drop it): the next page starts with it
                data["hasMore"] = True
                data["truncated"] = {"maxChars": max_chars, "droppedResults": max(1, page.get("size", limit) - len(results)),
                                     "snippetsShortenedTo": None, "overBudget": False}
                break
        data["alsoSearched"] = query.notes()
    finally:
        store.close()
    data["resultCount"] = len(results)
    data["nextOffset"] = offset + len(results) if data["hasMore"] else None
    return data


def _smallest_size(data, render):
    """How long render(search_json(data)) is with every snippet as short as fit_budget cuts it for a
    page of several results."""
    return len(render(_shortened(search_json(data), SNIPPET_WIDTHS[-1])))


def search_budget(params):
    """The characters a search's output may take: DEFAULT_MAX_CHARS unless max_chars says (0: no
    limit). Agents pay per byte."""
    return DEFAULT_MAX_CHARS if params["max_chars"] is None else params["max_chars"]


def search_request(ctx, params, render=None):
    """`search`: the sessions that match, best first, as data (search_json gives the JSON printed).
    `render`: how the caller prints a page (search_json's form), to build only results that fit
    within the budget (search_budget); the caller then fits the page to it (fit_budget)."""
    if params["max_chars"] is not None and params["max_chars"] < 0:
        raise UsageError("--max-chars must be 0 (no limit) or more")
    if not params["query"]:
        raise UsageError("give the words to search for", hint='sesame search "nix flake"')
    return search_sessions(ctx, " ".join(params["query"]), limit=DEFAULT_LIMIT if params["limit"] is None else params["limit"],
                           offset=params["offset"], refresh=not params["no_refresh"], cwd=params["cwd"],
                           after=params["after"], before=params["before"], agent=params["agent"], tools=params["tools"],
                           tool=params["tool"], path=params["path"], fields=params["fields"],
                           max_chars=search_budget(params), render=render, host=params.get("host"))


def show_session(ctx, ref, around=None, context=SHOW_CONTEXT, tools=False, everything=False, refresh=True):
    """`sesame show --json` before --max-chars: the session's header and its chunks (all, or around one)."""
    if context < 0:
        raise UsageError("--context must be at least 0")
    expand = set(COLLAPSIBLE) if everything else {"tool"} if tools else set()
    first_use = not os.path.exists(ctx.index_path)
    store = ctx.store()
    try:
        if refresh:
            refresh_before_reading(ctx, store, first_use)
        s = resolve_session(store, ref)
        s["short_id"] = short_id(store, s["session_id"], s["id"])
        s["title"] = session_title(store, s)
        last = store.last_seq(s["id"])
        lo, hi = 0, last
        if around is not None:
            if not 0 <= around <= last:
                raise UsageError("--around %d is outside the session's chunks (0-%d)" % (around, last))
            lo, hi = max(0, around - context), min(last, around + context)
        chunks = []
        for seq, kind, role, tool, ts, text in store.chunks(s["id"], lo, hi):
            short = kind in COLLAPSIBLE and kind not in expand
            chunks.append({"seq": seq, "kind": kind, "role": role, "tool": tool, "timestamp": ts,
                           "text": collapse(kind, text) if short else text, "collapsed": short})
    finally:
        store.close()
    return {"session": place_session(ctx.env, ctx.remotes, s, session_header(s)), "around": around, "chunks": chunks, "truncated": False,
            "omitted": {"before": lo, "after": last - hi, "cutSeq": None}}


def show_request(ctx, params):
    """`show`: one session's header and chunks, whole (front ends bound it: bound_json, show_text)."""
    if params["max_chars"] is not None and params["max_chars"] < 0:
        raise UsageError("--max-chars must be at least 0 (0: no limit)")
    return show_session(ctx, " ".join(params["session"]), around=params["around"], context=params["context"],
                        tools=params["tools"], everything=params["all"], refresh=not params["no_refresh"])


def status_request(ctx, params=None):
    """`status`: what is indexed, from where, how fresh (what `sesame status --json` prints)."""
    store = ctx.store(create=False)
    info = {"indexPath": ctx.index_path, "indexExists": store is not None, "configPath": config_path(ctx.env),
            "configFound": ctx.cfg_path is not None, "sqliteVersion": sqlite3.sqlite_version,
            "sesameVersion": __version__, "schemaVersion": SCHEMA_VERSION,
            "sources": [s.as_json() for s in ctx.sources], "warnings": ctx.warnings,
            "remotes": remote_list(ctx.env) if ctx.remotes else []}
    if store is not None:
        try:
            per = {a: {"agent": a, "sessions": n, "chunks": c or 0, "deletedKept": d or 0}
                   for a, n, c, d in store.agent_totals()}
            for parser_id, seen in store.unrecognized_records():
                p = per.setdefault(parser_id, {"agent": parser_id, "sessions": 0, "chunks": 0, "deletedKept": 0})
                counts = p.setdefault("unrecognizedRecords", {})
                for kind, n in (seen.get("types") or {}).items():
                    counts[kind] = counts.get(kind, 0) + n
                p["versionsSeen"] = sorted(set(p.get("versionsSeen", [])) | set(_list(seen.get("versions"))))
            for p in per.values():
                parser = PARSERS.get(p["agent"])
                p["verified"] = parser.verified if parser else None
                p["retention"] = parser.retention(ctx.env) if parser else None
                if not p.get("unrecognizedRecords"):
                    p.pop("unrecognizedRecords", None)
            rows, not_indexed_count = store.files_not_indexed()
            not_indexed = [{"path": shown_path(path), "agent": parser_id, "state": state, "reason": reason}
                           for path, parser_id, state, reason in rows]
            info.update({
                "indexBytes": store.size_bytes(),
                "lastIndex": store.meta("last_index"),
                "sessions": sum(p["sessions"] for p in per.values()),
                "chunks": sum(p["chunks"] for p in per.values()),
                "files": sum(sum(c.values()) for c in store.file_states().values()),
                "filesNotIndexed": not_indexed_count,
                "notIndexed": not_indexed,
                "keepDeletedSessions": ctx.policy.keep_deleted,
                "perAgent": list(per.values()),
                "changedSinceLastIndex": _changed_count(plan_full(store, ctx.sources, IndexSummary(), ctx.policy)),
                # (of those, the files a new parser version reads again, a share at each search: REREAD_BYTES)
                "readAgain": store.version_stale_rows(parser_versions()),
                "mergeDue": store.merge_due(),   # (replaced text to merge out: see COMPACT_PAGES)
            })
        finally:
            store.close()
    return info


def sources_request(ctx, params=None):
    """`sources`: what `sesame sources --json` prints: {"sources": [...]}, per agent, where it is looked for, how many files were
    found there and what became of them (indexed, or not and why), and the sessions indexed."""
    store = ctx.store(create=False)
    files, sessions = {}, collections.Counter()
    if store is not None:
        try:
            files = store.file_states()
            sessions.update({agent: n for agent, n, _, _ in store.agent_totals()})
        finally:
            store.close()
    configured = {}
    for s in ctx.sources:
        configured.setdefault(s.parser.id, []).append(s)
    rows = []
    for pid, parser in PARSERS.items():
        roots = [s.path for s in configured[pid]] if pid in configured else parser.default_roots(ctx.env)
        seen = files.get(pid, collections.Counter())
        rows.append({"agent": pid, "name": parser.label, "locations": [{"path": r, "exists": os.path.exists(r)} for r in roots],
                     "active": pid in configured, "filesFound": sum(seen.values()) - seen["deleted"],
                     "filesIndexed": seen["ok"] + seen["damaged"],
                     "filesNotIndexed": {k: seen[k] for k in ("skipped", "damaged", "unreadable") if seen[k]},
                     "sessionsIndexed": sessions[pid],
                     # (kept inside each project: found only under a folder the config names)
                     "projectFiles": list(parser.project_files)})
    return {"sources": rows, "config": config_path(ctx.env)}


def _changed_count(plan):
    return len(plan.todo) + len(plan.gone)




LOCK_WAIT_SECONDS = 600  # how long `sesame index` waits for another indexer before it gives up


def index_request(ctx, params, progress=None):
    """`index`: bring the index up to date (every file compared; --full: rebuilt from scratch), waiting
    for another indexer up to LOCK_WAIT_SECONDS. Returns the run's IndexSummary (its as_json() is
    what `sesame index --json` prints). `progress`: as for run_index."""
    store = ctx.store()
    try:
        if store.readonly:
            raise StoreError("the index %s cannot be written" % store.path,
                             hint="check the permissions of %s and the files in it" % os.path.dirname(store.path))
        lock = IndexLock(os.path.dirname(ctx.index_path))
        if not lock.acquire(0):
            _stderr("sesame: another sesame index is running; waiting for it to finish")
            if not lock.acquire(LOCK_WAIT_SECONDS):
                raise StoreError("another sesame index is still running after %ds" % LOCK_WAIT_SECONDS,
                                 hint="try again when it has finished")
        try:
            try:
                summary = run_index(store, ctx.sources, full=params["full"], progress=progress, policy=ctx.policy,
                                    merge_seconds=0)
            except sqlite3.DatabaseError as e:
                if not (params["full"] and _is_corrupt(e)):
                    raise
                # Damage the opening checks did not see: --full starts from a new file instead.
                store.close()
                store = Store._rebuild_corrupt(ctx.index_path, e)
                summary = run_index(store, ctx.sources, full=True, progress=progress, policy=ctx.policy, merge_seconds=0)
        finally:
            lock.release()
        merge_index(store, summary, None, progress, yield_to=lock)   # (without the index lock: see _full_round)
        summary.seconds += summary.merge_seconds or 0
        return summary
    finally:
        store.close()


FORGET_LOCK_WAIT = 60  # seconds forget waits for a running index (it holds an older list of forgotten sessions)


def _forgotten(items, ref):
    return [i for i in items if i["sessionId"] == ref] or [i for i in items if i["sessionId"].startswith(ref)]


def _save_forgotten_or_fail(items, env, what):
    """save_forgotten, a failure to write said as a StoreError naming `what` was being done (and
    that nothing was changed): the caller writes the list before it changes the index."""
    try:
        save_forgotten(items, env)
    except OSError as e:  # a full disk, a read-only data directory
        raise StoreError("cannot %s: cannot write %s: %s; nothing was changed" % (what, forgotten_path(env), e.strerror or e))


def forget_request(ctx, params):
    """`forget`: remove a session from the index and keep it out (sessions with secrets, private
    projects): {"forgotten": item}; with undo, {"remembered": item}; with list, {"forgotten": [items]}.

    Every copy of the session goes, and its text is wiped from the index files (Store.forget_session,
    Store.wipe_free_space). A failure before the session is deleted (a full disk, another indexer that does
    not finish, a locked index) leaves the index and the list of forgotten sessions as they were; a
    failure of the wipe after it says so, and `forget` of the same session runs the wipe again."""
    items = load_forgotten(ctx.env)
    if params["list"]:
        return {"forgotten": items}
    if not params["session"]:
        raise UsageError("name the session to forget (or --list)")
    ref = " ".join(params["session"])
    if params["undo"]:
        undone = _forgotten(items, ref)
        if len(undone) != 1:
            raise SesameError('"%s" matches %d forgotten sessions' % (ref, len(undone)),
                              kind="not_found" if not undone else "ambiguous", hint="`sesame forget --list` shows them")
        item = undone[0]
        store = ctx.store()
        try:
            store.read_again(set(_list(item.get("files"))) | {item.get("path")})  # every file that held a copy
        finally:
            store.close()
        _save_forgotten_or_fail([i for i in items if i is not item], ctx.env, "undo the forget")
        return {"remembered": item}
    store = ctx.store()
    lock = IndexLock(os.path.dirname(ctx.index_path))
    try:
        if store.readonly:
            raise StoreError("cannot forget: the index %s cannot be written" % store.path)
        if not lock.acquire(FORGET_LOCK_WAIT):
            raise StoreError("cannot forget: another sesame index is still running after %ds; nothing was "
                              "forgotten" % FORGET_LOCK_WAIT, hint="try again when it has finished")
        try:
            s = resolve_session(store, ref, any_copy=True)
        except SesameError as e:
            again = _forgotten(items, ref) if e.kind == "not_found" else []
            if len(again) != 1:
                raise
            s, item = None, again[0]  # forgotten before: wipe the index files again (an earlier wipe failed)
        if s is not None:
            item = {"agent": s["agent"], "sessionId": s["session_id"], "path": s["path"], "name": s["name"],
                    "files": store.session_files(s["agent"], s["session_id"]), "forgottenAt": iso(now_utc())}
            listed = any((i["agent"], i["sessionId"]) == (item["agent"], item["sessionId"]) for i in items)
            if not listed:
                _save_forgotten_or_fail(items + [item], ctx.env, "forget %s" % item["sessionId"])
            try:
                store.forget_session(item["agent"], item["sessionId"])
            except sqlite3.Error as e:
                if not listed:
                    try:
                        save_forgotten(items, ctx.env)
                    except OSError:
                        pass
                raise StoreError("cannot forget %s: %s; nothing was forgotten, the index is as it was"
                                  % (item["sessionId"], e), hint="free some disk space, or try again when "
                                                                 "other sesame processes have finished")
        try:
            store.wipe_free_space()
        except sqlite3.Error as e:
            raise StoreError("forgot %s (no search finds it), but its text could not be wiped from the index "
                              "files yet: %s" % (item["sessionId"], e),
                              hint="free disk space about the index's size, then run `sesame forget %s` again"
                                   % item["sessionId"])
    finally:
        lock.release()
        store.close()
    return {"forgotten": item}


# ==================================================================================================
# Other machines: remotes over ssh
# ==================================================================================================
#
# A remote is a machine the user reaches with `ssh HOST` (their own ssh config, keys and agent do
# the authentication: Sesame never sees a password or a key). `sesame sync` asks the remote, in one
# ssh call, where its agents keep sessions (its $HOME, $CODEX_HOME, $XDG_DATA_HOME...: the parsers'
# own default_roots, given the remote's environment), copies those folders with rsync into a mirror
# under the data directory, and the mirror is then indexed like any local folder, by the same
# parsers. Layout, per remote NAME:
#   <data dir>/remotes/NAME/files/<the remote's absolute path>   the mirror (0700, never pruned:
#                                                                a session the remote deleted stays)
#   <data dir>/remotes/NAME/sync.json                            the last sync: when, the error, roots
# The list of remotes is in <config dir>/remotes.json, a file Sesame alone writes: `remote add` never
# rewrites the user's hand-written config.jsonc (its comments and layout would be at risk).
# Whatever the remote sends is untrusted: rsync drops symlinks that point out of the copied tree
# (--safe-links), the mirror is checked for such links after every sync, and the tar fallback takes
# regular files with plain relative names only.

REMOTE_NAME_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# An ssh destination: [user@]host, letters, digits and . _ - only (no ':' either: rsync reads
# "host:path"); never a leading '-', which ssh and rsync would take as an option.
REMOTE_HOST_RE = LazyPattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:@[A-Za-z0-9_][A-Za-z0-9_.-]*)?\Z")
LOCAL_HOST = "local"          # `--host local`: the sessions of this machine only (no remote may take the name)
SSH_CONNECT_TIMEOUT = 10      # seconds before an unreachable remote is given up
SYNC_TIMEOUT = 3600           # seconds one copy may take at most (a first sync of a large history)
REMOTE_SYNC_SECONDS = 900     # `watch` and `mcp` sync each remote this often (config "remoteSyncSeconds")
REMOTE_FOLDER_ROUNDS = 4      # at most this many ssh calls asking which folders a remote has (2 in practice)


def check_remote_name(name):
    """The name as given, or a UsageError: it becomes a folder name and a [tag] in the output."""
    if not isinstance(name, str) or not REMOTE_NAME_RE.match(name) or name == LOCAL_HOST:
        raise UsageError("invalid remote name %r: letters, digits, '.', '_' and '-' only, not starting with "
                         "'-' (and not %r)" % (name, LOCAL_HOST))
    return name


def check_remote_host(host):
    """The ssh destination as given, or a UsageError: it reaches ssh and rsync as an argument."""
    if not isinstance(host, str) or len(host) > 255 or not REMOTE_HOST_RE.match(host):
        raise UsageError("invalid ssh host %r: [user@]host with letters, digits, '.', '_' and '-' only, "
                         "not starting with '-' (options belong in ~/.ssh/config)" % (host,))
    return host


def remotes_path(env):
    """The list of remotes: a file of Sesame's own beside the user's config."""
    return os.path.join(config_dir(env), "remotes.json")


def remote_dir(env, name):
    """Everything Sesame keeps about one remote: its mirror and its last sync."""
    return os.path.abspath(os.path.join(data_dir(env), "remotes", name))


def remote_mirror(env, name):
    """The folder a remote's session folders are copied into (their absolute paths below it)."""
    return os.path.join(remote_dir(env, name), "files")


def load_remotes(env):
    """{name: {"host": ssh host, "agents": [parser ids] or None, "projects": [folders]}} from
    remotes.json (projects only when given); entries that are
    not valid (a hand edit) are refused with the file's name."""
    path = remotes_path(env)
    if not os.path.exists(path):
        return {}
    data = load_jsonc(path)
    remotes = data.get("remotes") if isinstance(data, dict) else None
    if not isinstance(remotes, dict):
        raise ConfigError('%s: must be {"remotes": {NAME: {"host": ..., "agents": [...]}}}' % path)
    for name, entry in remotes.items():
        try:
            check_remote_name(name)
            check_remote_host(entry.get("host") if isinstance(entry, dict) else None)
            _check_agents(entry.get("agents"))
            if entry.get("projects") is not None and not isinstance(entry["projects"], list):
                raise UsageError("projects must be a list of folders")
            check_remote_projects(entry.get("projects"))
        except UsageError as e:
            raise ConfigError("%s: %s" % (path, e.message))
    return remotes


def _check_agents(agents):
    if agents is None:
        return None
    if not isinstance(agents, list) or not agents or not all(isinstance(a, str) and a in PARSERS for a in agents):
        raise UsageError("agents must be a list of known agents (%s)" % ", ".join(PARSERS))
    return agents


def _write_json(path, obj):
    """Write a small file Sesame owns, atomically, readable by the user alone."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_private(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def check_remote_projects(projects):
    """Folders of projects on a remote, as given (`~` is the remote's home), or a UsageError. They
    reach rsync (--protect-args) and sh (quoted) as arguments; a relative path, `..` or a control
    character has no meaning there and is refused."""
    if isinstance(projects, str):
        projects = [p.strip() for p in projects.split(",") if p.strip()]
    for p in projects or ():
        if (not isinstance(p, str) or not (p == "~" or p.startswith(("~/", "/"))) or ".." in p.split("/")
                or any(ord(c) < 32 or c == "\x7f" for c in p)):
            raise UsageError("invalid projects folder %r: an absolute path on the remote, or ~/..." % (p,))
    return list(projects or ()) or None


def remote_add(env, name, host=None, agents=None, projects=None):
    """Add (or change) a remote: the data `remote add` prints."""
    check_remote_name(name)
    check_remote_host(host or name)
    if isinstance(agents, str):
        agents = [a.strip() for a in agents.split(",") if a.strip()]
    _check_agents(agents or None)
    projects = check_remote_projects(projects)
    remotes = load_remotes(env)
    remotes[name] = {"host": host or name, "agents": agents or None}
    if projects:
        remotes[name]["projects"] = projects
    _write_json(remotes_path(env), {"remotes": remotes})
    return dict(remotes[name], name=name, mirror=remote_mirror(env, name))


def remote_list(env):
    """Every remote with its last sync (the data `remote list` prints)."""
    return [dict(entry, name=name, mirror=remote_mirror(env, name), **sync_state(env, name))
            for name, entry in sorted(load_remotes(env).items())]


def remote_remove(env, name):
    """Forget a remote: it leaves the list, its mirror is deleted and its sessions leave the index."""
    remotes = load_remotes(env)
    if name not in remotes:
        raise UsageError("no remote named %r (sesame remote list shows them)" % name)
    del remotes[name]
    _write_json(remotes_path(env), {"remotes": remotes})
    prefix = remote_mirror(env, name) + os.sep
    if os.path.exists(index_path(env)):
        store = Store.open(index_path(env))
        lock = IndexLock(os.path.dirname(index_path(env)))
        try:
            if lock.acquire(LOCK_WAIT_SECONDS):
                with store.transaction():
                    store.drop_files_under(prefix)
        finally:
            lock.release()
            store.close()
    import shutil
    shutil.rmtree(remote_dir(env, name), ignore_errors=True)
    return {"name": name, "removed": True}


def sync_state(env, name):
    """What the last sync of a remote left: lastSync (success), lastAttempt, error, method, roots."""
    try:
        with open_regular(os.path.join(remote_dir(env, name), "sync.json"), text=True) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    state = state if isinstance(state, dict) else {}
    return {"lastSync": state.get("lastSync"), "lastAttempt": state.get("lastAttempt"), "error": state.get("error"),
            "method": state.get("method"), "roots": [r for r in state.get("roots") or () if isinstance(r, list)]}


def remote_sources(env, remotes):
    """The mirrors' session folders as sources (roots found by the last sync that reached the remote)."""
    sources = []
    for name, entry in sorted(remotes.items()):
        mirror = remote_mirror(env, name)
        for agent, root in sync_state(env, name)["roots"]:
            if agent in PARSERS and isinstance(root, str) and root.startswith("/") and os.path.exists(mirror + root):
                sources.append(Source(PARSERS[agent], mirror + root, "remote " + name))
    return sources


def session_host(env, remotes, path):
    """The remote a session's file was copied from (None: this machine)."""
    path = fs_path(path) or ""
    for name in remotes:
        if path.startswith(remote_mirror(env, name) + os.sep):
            return name
    return None


def host_filter(env, remotes, host):
    """--host as (path prefix, inside): sessions whose file is (or is not) under that prefix."""
    if not host:
        return None
    if host == LOCAL_HOST:
        return (os.path.join(os.path.abspath(data_dir(env)), "remotes", ""), False)   # below no mirror
    if host not in remotes:
        raise UsageError("unknown host %r (known: %s)" % (host, ", ".join([LOCAL_HOST] + sorted(remotes))))
    return (remote_mirror(env, host) + os.sep, True)


def place_session(env, remotes, s, out):
    """Set `host` and, for a remote's session, the resume command that runs there, in a result or a
    header (`out`) made from the session row `s`."""
    host = session_host(env, remotes, s["path"]) if remotes else None
    out["host"] = host
    if host:
        mirror = remote_mirror(env, host)
        inner = resume_command(dict(s, path=fs_path(s["path"])[len(mirror):]))  # pi names the remote's file
        # The command runs in the remote's shell: quoted once for it (by the parser), once more here
        # for the local shell the user pastes it into.
        out["resumeCommand"] = ("ssh -t %s %s" % (remotes[host]["host"], shell_quote(inner))) if inner else None
    return out


# What the remote is asked first: its environment (the variables the parsers read), its OS and
# whether it has rsync. The names are the parsers' own (found by running default_roots with an
# environment that records what is read), so an agent added later is synced without a change here.
class _RecordingEnv(dict):
    def __init__(self, home):
        super().__init__(HOME=home)
        self.names = {"HOME"}

    def get(self, key, default=None):
        self.names.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.names.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.names.add(key)
        return super().__contains__(key)


def _env_names(agents):
    env = _RecordingEnv("/nonexistent-home")
    for p in agents:
        p.default_roots(env)
    return sorted(n for n in env.names if re.fullmatch(r"[A-Z_][A-Z0-9_]*", n))


def probe_snippet(names):
    """A POSIX sh line printing NAME=VALUE\\0 for each set variable, `uname SYSTEM\\0` (uname -s),
    then rsync\\0 when rsync exists."""
    return "".join('[ -n "${%s+x}" ] && printf \'%%s=%%s\\0\' %s "$%s"; ' % (n, n, n) for n in names) + \
        "printf 'uname %s\\0' \"$(uname -s 2>/dev/null)\"; command -v rsync >/dev/null 2>&1 && printf 'rsync\\0'; exit 0"


def remote_platform(system):
    """`uname -s` of a remote -> the OS layout its agents follow, as sys.platform spells it (other
    Unixes keep ~/.config and ~/.local/share like Linux)."""
    return "darwin" if system == "Darwin" else "linux"


# The questions about folders, put to the remote as arguments `isdir:PATH` or `subdirs:PATH`; it
# prints (NUL after each) every PATH asked about that is a folder and every folder inside one asked
# to be listed. [ -d ] follows symlinks, as os.path.isdir does here.
FOLDERS_SNIPPET = ('for q; do p=${q#*:}; case $q in '
                   'isdir:*) [ -d "$p" ] && printf \'%s\\0\' "$p";; '
                   'subdirs:*) for c in "$p"/* "$p"/.[!.]* "$p"/..?*; do [ -d "$c" ] && printf \'%s\\0\' "$c"; done;; '
                   'esac; done; exit 0')


def ssh_command(host, *remote):
    """ssh that never prompts (BatchMode: a sync must not hang on a password or a host key question)
    and gives up on an unreachable host."""
    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % SSH_CONNECT_TIMEOUT, host] + list(remote)


def remote_roots(mirror, remote_env, platform, agents, ask):
    """[(agent, remote root)] the agents keep sessions in on the remote, worked out by their own
    default_roots from the remote's environment (a RemoteEnv: its paths moved under the mirror, so
    that only roots derived from it count). Places that count only when their folder exists are
    asked about: ask([(kind, path)]) puts the questions default_roots raised to the remote and
    returns the folders it has among them (see FOLDERS_SNIPPET); default_roots then runs again with
    the answers, which may raise new questions (the extension folders inside a VS Code storage that
    exists), until none is new."""
    def moved(value):
        return ",".join(mirror + v if v.startswith("/") else v for v in value.split(","))
    variables = {k: moved(v) for k, v in remote_env.items()}
    folders, answered = set(), set()
    for attempt in range(REMOTE_FOLDER_ROUNDS + 1):
        env = RemoteEnv(variables, mirror, platform, folders, answered)
        roots = []
        for p in agents:
            for root in p.default_roots(env):
                if root.startswith(mirror + "/") and (p.id, root[len(mirror):]) not in roots:
                    roots.append((p.id, root[len(mirror):]))
        if not env.questions or attempt == REMOTE_FOLDER_ROUNDS:
            break
        # The remote's word is taken for the paths asked about and for plain names inside a folder
        # asked to be listed, nothing else (its answers are untrusted like its files).
        isdir = {path for kind, path in env.questions if kind == "isdir"}
        listed = {path for kind, path in env.questions if kind == "subdirs"}
        for f in ask(env.questions):
            folder, _, name = f.rpartition("/")
            if f in isdir or (folder in listed and name not in ("", ".", "..")):
                folders.add(f)
        answered.update(env.questions)
    return roots


class SyncFailure(SesameError):
    """A remote could not be synced (unreachable, refused, a copy that failed)."""


def _run(cmd, stdin=None, timeout=SYNC_TIMEOUT):
    import subprocess
    try:
        return subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except OSError as e:
        raise SyncFailure("cannot run %s: %s" % (cmd[0], e.strerror or e))
    except subprocess.TimeoutExpired:
        raise SyncFailure("%s took longer than %ds" % (cmd[0], timeout))


def _last_line(stderr):
    lines = [l.strip() for l in stderr.decode("utf-8", "replace").splitlines() if l.strip()]
    return visible(lines[-1]) if lines else "no message"


def project_filters(patterns):
    """rsync filter rules that copy, of folders of projects, only the per-project agents' files
    (Parser.project_files), skipping the folders a local walk skips (walk_projects). The first rule
    that matches decides; a pattern holding a `/` is matched against the end of the path."""
    return (["--exclude=%s/" % d for d in sorted(PROJECT_SKIP_DIRS)] +
            ["--include=%s/" % h for h in project_hidden(patterns)] + ["--exclude=.*/", "--include=*/"] +
            ["--include=%s" % pat for pat in patterns] + ["--exclude=*", "--prune-empty-dirs"])


def project_find(patterns):
    """The same choice as project_filters, as the arguments of a POSIX find after its folder."""
    skip = sorted(PROJECT_SKIP_DIRS)
    names = " -o ".join(["-name %s" % d for d in skip] +
                        ["( -name .* %s)" % "".join("! -name %s " % h for h in project_hidden(patterns))])
    files = " -o ".join(("-path */%s" if "/" in pat else "-name %s") % pat for pat in patterns)
    return "-mindepth 1 ( -type d ( %s ) -prune ) -o -type f ( %s )" % (names, files)


def _rsync_copy(host, roots, mirror, note, filters=()):
    """Copy the roots with rsync (append-friendly: an appended file moves only its new bytes);
    `filters`: rsync filter rules (project_filters)."""
    if not roots:
        return 0
    ssh = " ".join(ssh_command(host)[:-1])
    cmd = ["rsync", "-a", "--partial", "--relative", "--protect-args", "--safe-links", "--ignore-missing-args",
           "--stats"] + list(filters) + ["-e", ssh, "--"] + ["%s:%s/" % (host, r) for r in roots] + [mirror + "/"]
    # (The trailing "/" copies what a root that is a symlink points to, as a local read would.)
    done = _run(cmd)
    if done.returncode == 23:  # some files could not be read there: the others are copied, say which
        note("sesame: %s: some files were not copied: %s" % (host, _last_line(done.stderr)))
    elif done.returncode not in (0, 24):  # 24: a file vanished while copied (an agent rotated it)
        raise SyncFailure("rsync failed (exit %d): %s" % (done.returncode, _last_line(done.stderr)))
    stats = done.stdout.decode("utf-8", "replace")
    found = re.search(r"Literal data: ([\d,]+)", stats)
    return int(found.group(1).replace(",", "")) if found else None


def _tar_copy(host, roots, mirror, since, projects=(), patterns=()):
    """Copy with `ssh HOST tar` where rsync is missing: the files changed since the last sync (by the
    remote's clock, -mmin), whole; of the folders of `projects`, the per-project agents' files only
    (project_find). Only regular files with plain relative names are written."""
    import shlex
    import subprocess
    import tempfile
    newer = ""
    if since:
        minutes = int((time.time() - parse_time(since).timestamp()) / 60) + 2
        newer = " -mmin -%d" % max(minutes, 1)

    def each(folders, test):
        return "for d in %s; do [ -e \"$d\" ] && find -H \"$d\" %s%s -print; done; " % (
            " ".join(shlex.quote(r.lstrip("/")) for r in folders), test, newer) if folders else ""
    chosen = " ".join(shlex.quote(w) for w in project_find(patterns).split()) if projects else ""
    script = "cd / && { %s%s} | tar -cf - -T - 2>/dev/null; exit 0" % (
        each(roots, "-type f"), each(projects, "%s" % chosen))
    roots = list(roots) + list(projects)
    moved = 0
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(ssh_command(host, "sh -c " + shlex.quote(script)), stdout=subprocess.PIPE,
                                    stderr=errors)
        except OSError as e:
            raise SyncFailure("cannot run ssh: %s" % (e.strerror or e))
        try:
            moved = _untar(proc.stdout, roots, mirror)   # read as it comes: memory stays bounded
        finally:
            proc.stdout.close()
            code = proc.wait()
        errors.seek(0)
        if code != 0:
            raise SyncFailure("ssh tar failed (exit %d): %s" % (code, _last_line(errors.read())))
    return moved


def _untar(stream, roots, mirror):
    """Write the regular files of a tar stream that lie inside the roots into the mirror; returns
    their bytes. Anything else (links, devices, absolute or `..` names) is left out."""
    import shutil
    import tarfile
    moved = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                parts = m.name.split("/")
                if not m.isfile() or m.name.startswith("/") or any(p in ("", ".", "..") for p in parts) or \
                        not any(m.name.startswith(r.lstrip("/") + "/") for r in roots):
                    continue
                target = os.path.join(mirror, *parts)
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                if os.path.islink(os.path.dirname(target)) or os.path.islink(target):
                    continue
                tmp = target + ".sesame-part"
                with tar.extractfile(m) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.utime(tmp, (m.mtime, m.mtime))
                os.replace(tmp, target)
                moved += m.size
    except tarfile.TarError as e:
        raise SyncFailure("the remote's tar output cannot be read: %s" % e)
    return moved


def _drop_escaping_links(mirror):
    """Remove symlinks in the mirror that point outside it (the remote's data is untrusted: a link
    to /etc/passwd would otherwise be indexed as a session file of this machine)."""
    top = os.path.realpath(mirror)
    dropped = 0
    for folder, dirs, files in os.walk(mirror):
        for n in dirs + files:
            p = os.path.join(folder, n)
            if os.path.islink(p):
                target = os.path.realpath(p)
                if target != top and not target.startswith(top + os.sep):
                    os.unlink(p)
                    dropped += 1
    return dropped


def sync_remote(env, name, entry, note=None):
    """Copy one remote's session folders into its mirror. Returns what was done (dict); raises
    SyncFailure (recorded in sync.json for `status`) when the remote cannot be reached or copied."""
    note = note or (lambda message: None)
    host = check_remote_host(entry["host"])
    home = remote_dir(env, name)
    mirror = remote_mirror(env, name)
    for folder in (data_dir(env), os.path.dirname(home), home, mirror):  # each one 0700, like the index's
        os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    state = sync_state(env, name)
    state["lastAttempt"] = iso(now_utc())
    lock = IndexLock(home)  # one sync of a remote at a time
    if not lock.acquire(0):
        raise SyncFailure("another sync of %s is running" % name)
    try:
        agents = [PARSERS[a] for a in entry.get("agents") or PARSERS]
        import shlex
        probe = _run(ssh_command(host, "sh -c " + shlex.quote(probe_snippet(_env_names(agents)))), timeout=60)
        if probe.returncode != 0:
            raise SyncFailure("cannot reach %s: %s" % (host, _last_line(probe.stderr)))
        fields = probe.stdout.decode("utf-8", "surrogateescape").split("\0")
        remote_env = dict(f.split("=", 1) for f in fields if "=" in f)
        if not remote_env.get("HOME", "").startswith("/"):
            raise SyncFailure("%s did not say its home folder" % host)
        system = next((f[len("uname "):] for f in fields if f.startswith("uname ")), "")

        def ask(questions):
            words = " ".join(shlex.quote("%s:%s" % q) for q in questions)
            done = _run(ssh_command(host, "sh -c %s sh %s" % (shlex.quote(FOLDERS_SNIPPET), words)), timeout=60)
            if done.returncode != 0:
                raise SyncFailure("cannot reach %s: %s" % (host, _last_line(done.stderr)))
            return done.stdout.decode("utf-8", "surrogateescape").split("\0")
        roots = remote_roots(mirror, remote_env, remote_platform(system), agents, ask)
        # A root that is an SQLite store (Hermes' state.db) comes with its -wal: a running agent's
        # newest rows are there (missing files are skipped by both copies).
        paths = sorted({r for _, r in roots} | {r + "-wal" for _, r in roots if r.endswith(SQLITE_SUFFIXES)})
        # Folders of projects (remote add --projects): the files the per-project agents keep there.
        there = remote_env["HOME"].rstrip("/")
        folders = sorted({(there + f[1:] if f.startswith("~") else f).rstrip("/") or "/" for f in entry.get("projects") or ()})
        per_project = [p for p in agents if p.project_files]
        patterns = sorted({pat for p in per_project for pat in p.project_files})
        folders = folders if per_project else []
        roots += [(p.id, f) for f in folders for p in per_project]
        if "rsync" in fields and _which("rsync", env):
            method = "rsync"
            moved = _rsync_copy(host, paths, mirror, note)
            more = _rsync_copy(host, folders, mirror, note, project_filters(patterns))
            moved = None if moved is None or more is None else moved + more
        else:
            note("sesame: %s: rsync is missing %s; copying changed files with ssh and tar"
                 % (name, "on the remote" if "rsync" not in fields else "here"))
            method, moved = "tar", _tar_copy(host, paths, mirror, state.get("lastSync"), folders, patterns)
        dropped = _drop_escaping_links(mirror)
        state.update(lastSync=state["lastAttempt"], error=None, method=method, roots=[list(r) for r in roots])
        return {"name": name, "host": host, "ok": True, "method": method, "bytesCopied": moved,
                "roots": [r for _, r in roots if os.path.exists(mirror + r)], "linksDropped": dropped}
    except SyncFailure as e:
        state["error"] = e.message
        raise
    finally:
        lock.release()
        _write_json(os.path.join(home, "sync.json"), state)


def _which(program, env):
    import shutil
    return shutil.which(program, path=env.get("PATH") or os.defpath)


def sync_request(ctx, names=(), note=None):
    """Sync the remotes named (all when none), then index their mirrors: {"remotes": [...], "index": ...}.
    A remote that fails is reported in its entry ("ok": false, "error"); the others go on."""
    remotes = load_remotes(ctx.env)
    for n in names:
        if n not in remotes:
            raise UsageError("no remote named %r (sesame remote list shows them)" % n)
    done = []
    for name in names or sorted(remotes):
        try:
            done.append(sync_remote(ctx.env, name, remotes[name], note))
        except SyncFailure as e:
            done.append({"name": name, "host": remotes[name]["host"], "ok": False, "error": e.message})
    ctx = Context(ctx.env, warn=_quiet)   # the mirrors' folders found by this sync are sources now
    store = ctx.store()
    try:
        summary = None if store.readonly else refresh_index(ctx, store, wait_seconds=LOCK_WAIT_SECONDS)
    finally:
        store.close()
    return {"remotes": done, "index": summary.line() if summary else None}


class RemoteSyncer:
    """What `watch` and the MCP server use: a sync of the remotes in a background thread every
    remoteSyncSeconds, so that a search never waits for ssh."""

    def __init__(self):
        self.thread = None

    def poke(self, ctx):
        remotes = getattr(ctx, "remotes", None)
        if not remotes or (self.thread and self.thread.is_alive()):
            return False
        every = ctx.cfg.get("remoteSyncSeconds", REMOTE_SYNC_SECONDS)
        every = every if isinstance(every, (int, float)) and every > 0 else REMOTE_SYNC_SECONDS
        now = time.time()
        # Due: never tried, or tried `every` ago or more; a time ahead of now (a clock set back since)
        # or one that does not read as a time would otherwise put it off until then, or for ever.
        due = [n for n in remotes if (lambda t: not t or not 0 <= now - t.timestamp() < every)(
            parse_time(sync_state(ctx.env, n)["lastAttempt"]))]
        if not due:
            return False
        import threading

        def run():
            try:
                for r in sync_request(ctx, due, note=_stderr)["remotes"]:
                    if not r["ok"]:
                        _stderr("sesame: sync %s: %s" % (r["name"], r["error"]))
            except Exception as e:  # noqa: BLE001  (the next round tries again; searches go on)
                _stderr("sesame: sync: %s" % getattr(e, "message", e))
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return True


def sync_text(data):
    """What `sesame sync` prints for the remotes that synced (the failed ones go to stderr)."""
    out = []
    for r in data["remotes"]:
        if r["ok"]:
            out.append("%s: synced from %s with %s (%s bytes copied, %d session folders)%s" % (
                r["name"], r["host"], r["method"], "?" if r["bytesCopied"] is None else r["bytesCopied"],
                len(r["roots"]), "; %d links out of the mirror dropped" % r["linksDropped"] if r["linksDropped"] else ""))
    if data["index"]:
        out.append(data["index"])
    return visible("\n".join(out) + "\n") if out else ""


def remote_list_text(rows):
    """What `sesame remote list` prints."""
    if not rows:
        return "no remotes (add one: sesame remote add NAME --host SSH_HOST)\n"
    return visible("".join("%-12s %s%s%s  last sync: %s%s\n" % (
        r["name"], r["host"], " (%s)" % ",".join(r["agents"]) if r.get("agents") else "",
        " projects in %s" % ",".join(r["projects"]) if r.get("projects") else "", r["lastSync"] or "never",
        "; last attempt failed: %s" % r["error"] if r["error"] else "") for r in rows))


# ==================================================================================================
# MCP server: search, show and status as tools for agents (JSON-RPC 2.0 over stdio)
# ==================================================================================================
#
# One JSON message per line on stdin, one per line on stdout; stdout carries protocol messages only,
# logs go to stderr. Tool failures are results with isError (the model sees them and can retry);
# protocol failures (bad JSON, unknown method or tool) are JSON-RPC errors. Every call builds a fresh
# Context, so a config edited while the server runs is used by the next call; the index stays open
# across calls (WarmIndex).

MCP_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MCP_DEFAULT_PROTOCOL = "2025-06-18"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


# The tools take the options of the commands of the same name, in snake_case (--max-chars is

# The tools are commands of the command table (COMMANDS, at the end of the file) that have a tool
# description: they take the command's options in snake_case (--max-chars is max_chars), checked
# against the schema made from the command line's own definitions (request_params), and answer with
# the command's request, so the two never drift apart. A tool's formatter returns (the text most
# clients hand the model, the structuredContent: the JSON `sesame COMMAND --json` prints).

SEARCH_TOOL = ("Find past coding-agent sessions (pi, Claude Code, Codex, ...) by what they were about. "
               "Ranks whole sessions; each result has sessionId and matches[].seq to pass to show. Output is "
               "bounded (max_chars, %d by default); nextOffset pages on. Words that mean the same but are "
               "written differently do not match: when the top snippets do not fit what you look for (or "
               "matchedAllTerms is false), search again with two or three rephrasings in the words the session "
               "would have used (library and tool names, the error text, file names) and compare the top "
               "results of each before concluding it is not there." % DEFAULT_MAX_CHARS)
SHOW_TOOL = ("Read one session as a conversation. Use around=SEQ (from search matches[].seq) to read the "
             "part that matched; output is bounded by max_chars (%d by default) and says what was left out."
             % SHOW_JSON_MAX_CHARS)
STATUS_TOOL = ("What the session index covers: sessions per agent, sources, freshness, files not "
               "indexed and why.")


def _mcp_search(ctx, params):
    render = lambda d: to_json(d) + "\n"  # noqa: E731  (the model is given the JSON's size of it)
    data = search_json(search_request(ctx, params, render))
    fit_budget(data, search_budget(params), render)
    out = io.StringIO()
    print_results(data, False, out, MCP_WORDS)
    # The text is what most clients hand the model: say how to open each result where it matched.
    hints = ["%s around=%d" % (r.get("shortId") or r.get("sessionId"), r["matches"][0]["seq"]) for r in data["results"]
             if r.get("matches") and r["matches"][0]["seq"] is not None and (r.get("shortId") or r.get("sessionId"))]
    if hints:
        out.write("\nTo read a result, call show with session=ID and around=SEQ: %s\n" % "; ".join(hints))
    return out.getvalue(), data


def _mcp_show(ctx, params):
    data = show_request(ctx, params)
    limit = SHOW_JSON_MAX_CHARS if params["max_chars"] is None else params["max_chars"]
    return show_text(data, False, limit, MCP_WORDS), bound_json(data, limit)


def _mcp_status(ctx, params):
    info = status_request(ctx, params)
    return status_text(info), info


def _tools():
    """The commands served as tools: name -> Command."""
    return {name: c for name, c in COMMANDS.items() if c.tool}


def _tool_list():
    return [{"name": n, "description": c.tool, "inputSchema": option_schema(c)} for n, c in _tools().items()]


class _KeptStore:
    """The MCP server's open index as a call sees it: the commands close the store they are given
    when they are done; this one stays open for the next call. The counts a search asks of the
    index before ranking (in how many documents each word occurs, the vocabulary near a misspelt
    word: 2-3 ms of a 3-5 word query at 1 GB) are kept from call to call in `memo` while the index
    is unchanged, since an agent's searches share words ("the error", a project's names); so are
    the folders and the newest files the call's refresh compares (read-only: plan_quick only looks
    them up)."""

    def __init__(self, store, memo):
        self._store, self._memo = store, memo

    def __getattr__(self, name):
        return getattr(self._store, name)

    def _kept(self, key, compute):
        memo, con = self._memo, self._store.con
        # Another connection's commit (the background refresh) moves data_version; this one's own
        # (the call's refresh) moves total_changes. Either makes every kept count stale.
        state = (con.execute("PRAGMA data_version").fetchone()[0], con.total_changes)
        if memo.get(None) != state or len(memo) > 4096:
            memo.clear()
            memo[None] = state
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def doc_count(self, fts, limit=3):
        return self._kept(("count", fts, limit), lambda: self._store.doc_count(fts, limit))

    def part_count(self):
        return self._kept(("parts",), self._store.part_count)

    def vocab_terms(self, first, shortest, longest):
        return self._kept(("vocab", first, shortest, longest), lambda: self._store.vocab_terms(first, shortest, longest))

    def listings(self, sources=None):
        # (the folders every search compares: ~1,000 rows for a Codex history of dated folders)
        key = ("listings", None if sources is None else tuple(sources))
        return self._kept(key, lambda: self._store.listings(sources))

    def session_folder_count(self, source):
        return self._kept(("session folders", source), lambda: self._store.session_folder_count(source))

    def active_file_rows(self, since_ns, limit):
        # (the files every search compares: 200 rows, 0.3 ms. Kept while the index is unchanged,
        # the list can hold a file that has since grown older than `since_ns`: compared once more.)
        return self._kept(("active", limit), lambda: self._store.active_file_rows(since_ns, limit))

    def close(self):
        pass


class WarmIndex:
    """What the MCP server keeps from call to call: the index open, so that a call pays neither for
    opening it (~0.4 ms) nor for an empty page cache (SQLite's cache belongs to the connection: a
    new one reads every page it needs again). A call's own refresh is the cheap part of a search's
    (new and deleted sessions, active files, the caller's folder, the journals) without the sweep:
    the server's background refresh compares every file (_keep_fresh). An index file replaced or
    removed meanwhile (a rebuild of a damaged one) is opened again."""

    def __init__(self):
        self.store = self.ident = None
        self.memo = {}   # see _KeptStore

    def lend(self, ctx):
        """Make `ctx` use the kept index (opened when there is one to open and it is not yet)."""
        ctx.sweep = False
        try:
            st = os.stat(ctx.index_path)
            ident = (st.st_dev, st.st_ino)
        except OSError:
            ident = None
        if ident is None:  # no index yet: this call builds it, and says so, as a search does
            self.close()
            return
        if ident != self.ident:
            self.close()
            self.store = Store.open(ctx.index_path)
            self.store.keep_spare = True
            self.ident = ident
        ctx.kept = _KeptStore(self.store, self.memo)

    def close(self):
        if self.store is not None:
            self.store.close()
        self.store = self.ident = None
        self.memo.clear()



def call_tool(params, warm=None):
    name, args = params.get("name"), params.get("arguments")
    tools = _tools()
    if name not in tools:
        raise RpcError(INVALID_PARAMS, "no tool named %r: the tools are %s" % (name, ", ".join(tools))
                       if name is not None else "tools/call needs a tool name: %s" % ", ".join(tools))
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise RpcError(INVALID_PARAMS, "arguments must be an object")
    command = tools[name]
    try:
        ctx = Context(warn=_quiet)  # config warnings: once at start, and in status
        if warm is not None:
            warm.lend(ctx)
        text, data = command.mcp(ctx, request_params(command, args))
    except SesameError as e:
        msg = "sesame: %s%s" % (e.message, " (%s)" % e.hint if e.hint else "")
        return {"content": [{"type": "text", "text": msg}], "isError": True}
    except Exception as e:  # noqa: BLE001  (a busy index, a bad file: the server must stay up)
        _stderr("sesame mcp: %s failed:\n%s" % (name, _traceback()))
        return {"content": [{"type": "text", "text": "sesame: %s failed: %s" % (name, e)}], "isError": True}
    return {"content": [{"type": "text", "text": text}], "structuredContent": data, "isError": False}


def _initialize(params):
    asked = params.get("protocolVersion")
    return {"protocolVersion": asked if asked in MCP_PROTOCOL_VERSIONS else MCP_DEFAULT_PROTOCOL,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "sesame", "version": __version__},
            "instructions": "Search past coding-agent sessions with `search`, read the matching part with "
                            "`show` (session=sessionId, around=matches[].seq), then give the user resumeCommand."}


MCP_METHODS = {  # each takes the request's params and the server's WarmIndex (None: nothing kept)
    "initialize": lambda params, warm: _initialize(params),
    "ping": lambda params, warm: {},
    "tools/list": lambda params, warm: {"tools": _tool_list()},
    "tools/call": call_tool,
}


def _rpc_error(id_, code, message):
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def handle_message(msg, warm=None):
    """One decoded JSON-RPC message -> the response object, or None (notifications and responses get none)."""
    if isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg):
        return None  # a response to a request of ours: we send none, so there is nothing to match
    id_ = msg.get("id") if isinstance(msg, dict) else None
    if not isinstance(id_, (str, int)) or isinstance(id_, bool):
        id_ = None
    if (not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str)
            or ("id" in msg and id_ is None) or not isinstance(msg.get("params", {}), dict)):
        return _rpc_error(id_, INVALID_REQUEST, "Invalid Request")
    if "id" not in msg:
        return None  # a notification (initialized, cancelled, ...): never answered, nothing to do
    method = MCP_METHODS.get(msg["method"])
    if method is None:
        return _rpc_error(id_, METHOD_NOT_FOUND, "Method not found: %s" % msg["method"])
    try:
        return {"jsonrpc": "2.0", "id": id_, "result": method(msg.get("params") or {}, warm)}
    except RpcError as e:
        return _rpc_error(id_, e.code, e.message)
    except Exception as e:  # noqa: BLE001
        _stderr("sesame mcp: %s failed:\n%s" % (msg["method"], _traceback()))
        return _rpc_error(id_, INTERNAL_ERROR, "Internal error: %s" % e)


def _clean_json(value):
    """A decoded message with every lone surrogate (JSON allows "\\ud800") made U+FFFD, as main()
    does for argv: SQLite and UTF-8 output refuse them."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean_json(v) for k, v in value.items()}
    return value


def handle_line(line, warm=None):
    """One line of input -> the response object (or list, for a batch), or None."""
    try:
        msg = _clean_json(json.loads(line.decode("utf-8") if isinstance(line, bytes) else line))
    except BAD_JSON:  # also bad UTF-8, and nesting too deep to decode
        return _rpc_error(None, PARSE_ERROR, "Parse error")
    if isinstance(msg, list):  # a JSON-RPC batch (protocol 2025-03-26 allowed them)
        replies = [r for r in (handle_message(m, warm) for m in msg) if r is not None]
        return (replies or None) if msg else _rpc_error(None, INVALID_REQUEST, "Invalid Request")
    return handle_message(msg, warm)


MCP_REFRESH_SECONDS = 30.0


def serve_mcp(inp=None, out=None):
    """Answer MCP messages from `inp` (bytes lines) on `out` until `inp` closes; returns the exit code."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # a stray print must never corrupt the protocol stream
    _stderr("sesame mcp: serving sesame %s on stdio" % __version__)
    try:
        Context()  # says once, in the server's log, what the config gets wrong (calls report errors themselves)
    except SesameError:
        pass
    import threading
    stop, warm = threading.Event(), WarmIndex()
    threading.Thread(target=_keep_fresh, args=(stop, MCP_REFRESH_SECONDS), daemon=True).start()
    try:
        for line in iter(inp.readline, b""):
            if not line.strip():
                continue
            try:
                reply = handle_line(line, warm)
            except Exception:  # noqa: BLE001  (whatever one message does, the server answers the next)
                _stderr("sesame mcp: a message failed:\n%s" % _traceback())
                reply = _rpc_error(None, INTERNAL_ERROR, "Internal error")
            if reply is not None:
                out.write(json.dumps(reply) + "\n")  # ASCII JSON: right whatever stdout's encoding
                out.flush()
    except BrokenPipeError:
        pass  # the client went away: nothing left to answer
    finally:
        stop.set()
        warm.close()
        sys.stdout = real_stdout
    return EXIT_OK


# ==================================================================================================
# Export and the local page: a session as Markdown or HTML, and `sesame serve`
# ==================================================================================================
#
# Both exports and the page render the data show_session() returns; the page's search is
# search_sessions(). Session text is untrusted (a transcript can hold "<script>" or a crafted
# "<img onerror>"): every string goes through html.escape, and the page's script inserts data only
# as text, never as markup, except the session fragment this section rendered and escaped itself.

EXPORT_FORMATS = {"markdown": "markdown", "md": "markdown", "html": "html"}
html = _LazyModule("html")  # html.escape: imported by the commands that render HTML only


def _chunk_who(c):
    return {"tool": "tool %s" % (c["tool"] or ""), "summary": "summary"}.get(c["kind"], c["kind"]).strip()


def _tool_parts(c):
    """A tool chunk's (arguments, "output" or "error" or None, what it printed), from tool_text()'s
    layout: "tool: NAME", argument lines, then "output:" or "error:" and the tool's output."""
    lines = c["text"].split("\n")
    if lines and lines[0] == "tool: %s" % c["tool"]:
        lines = lines[1:]
    for i, line in enumerate(lines):
        if line in ("output:", "error:"):
            return "\n".join(lines[:i]), line[:-1], "\n".join(lines[i + 1:])
    return "\n".join(lines), None, ""


def _omitted_note(data, before):
    om = data["omitted"]
    if before:
        return "… %s not shown" % _count_seqs(om["before"], 0) if om["before"] else ""
    if not om["after"]:
        return ""
    first = data["chunks"][-1]["seq"] + 1 if data["chunks"] else om["before"]
    return "… %s not shown (use --around SEQ%s)" % (_count_seqs(om["after"], first),
                                                     " or a larger --max-chars" if data["truncated"] else "")


def _fit_export(data, max_chars, block, head):
    """`data` with only the chunks whose rendering fits max_chars beside the header `head` (0: all),
    as show_text() keeps them: the chunk asked for (--around) and its nearest neighbours."""
    if not max_chars:
        return data
    costs = [len(block(c)) for c in data["chunks"]]
    budget = max(max_chars - len(head) - 200, 0)  # 200: the "… N chunks not shown" notes
    if sum(costs) <= budget:
        return data
    # A chunk too big for the budget alone is cut, leaving room for its markup (300 > any chunk's).
    return _bounded(data, costs, budget, lambda c, room: dict(c, text=c["text"][:max(room - 300, 0)] + CUT_MARK))


# ---- Markdown

def md_fence(text, info=""):
    """A fenced code block GitHub renders as `text` whatever it holds: the fence is longer than any
    run of backticks inside (CommonMark closes a fence at a run at least as long)."""
    runs = re.findall(r"`+", text)
    fence = "`" * max(3, max(map(len, runs), default=0) + 1)
    return "%s%s\n%s\n%s\n" % (fence, info, text.rstrip("\n"), fence)


def _md_inline(text):
    """Inline code for a header value (a path, an id): delimiters longer than its backtick runs."""
    text = escape_breaks(text)
    ticks = "`" * (max(map(len, re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return "%s%s%s%s%s" % (ticks, pad, text, pad, ticks)


_FENCE_LINE = LazyPattern(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def md_closed(text):
    """A message's Markdown with a code block it leaves open closed at its end: agents' messages
    are cut (a length limit, an interrupted reply), and an open fence would swallow every message
    after it. CommonMark: a fence closes at a line of the same character, at least as long, with
    nothing after it but spaces."""
    fence = None
    for line in text.split("\n"):
        m = _FENCE_LINE.match(line)
        if not m:
            continue
        run, rest = m.group(1), m.group(2)
        if fence is None and not (run[0] == "`" and "`" in rest):
            fence = run
        elif fence and run[0] == fence[0] and len(run) >= len(fence) and not rest.strip():
            fence = None
    return text if fence is None else text.rstrip("\n") + "\n" + fence


def md_chunk(c):
    """One chunk as Markdown: messages as the text they are (agents write Markdown), tool calls,
    thinking and injected context in <details> (GitHub renders Markdown inside after a blank line)."""
    c, who = dict(c, text=visible(c["text"])), _chunk_who(c)  # terminal escapes in tool output: shown as ^[
    head = "**[%d] %s**%s" % (c["seq"], html.escape(who), " · " + _when(c["timestamp"]).strip() if c["timestamp"] else "")
    if c["kind"] == "tool":
        args, result, output = _tool_parts(c)
        summary = "[%d] %s: %s" % (c["seq"], who, collapse("tool", c["text"]))
        body = md_fence(args) if args else ""
        if result:
            body += "\n%s:\n\n%s" % (result, md_fence(output))
        return "<details><summary>%s</summary>\n\n%s\n</details>\n\n" % (html.escape(summary), body)
    if c["kind"] in COLLAPSIBLE:
        summary = "[%d] %s: %s" % (c["seq"], who, collapse(c["kind"], c["text"]))
        return "<details><summary>%s</summary>\n\n%s\n</details>\n\n" % (html.escape(summary), md_fence(c["text"]))
    return "%s\n\n%s\n\n" % (head, md_closed(c["text"].rstrip()))


def md_header(h):
    rows = [("agent", h["agent"]), ("cwd", h["cwd"]), ("created", short_date(h["created"])),
            ("modified", short_date(h["modified"])), ("session", h["sessionId"]), ("parent", h["parent"]),
            ("file", h["path"])]
    out = ["# %s\n" % html.escape(escape_breaks(h.get("title") or h["name"] or "Unnamed session"))]
    out += ["- %s: %s" % (k, _md_inline(v)) for k, v in rows if v]
    if h.get("summary"):
        out.append("- summary: %s" % html.escape(" ".join(h["summary"].split())))
    out.append("")
    if h["resumeCommand"]:
        out.append("Resume:\n\n" + md_fence(h["resumeCommand"], "sh"))
    return "\n".join(out) + "\n"


def show_markdown(data, max_chars=0):
    """`sesame show --format markdown`: the session as a GitHub-flavoured Markdown document."""
    head = md_header(data["session"])
    data = _fit_export(data, max_chars, md_chunk, head)
    notes = [_omitted_note(data, True), _omitted_note(data, False)]
    return "".join([head] + ["_%s_\n\n" % notes[0]] * bool(notes[0]) + [md_chunk(c) for c in data["chunks"]]
                   + ["_%s_\n" % notes[1]] * bool(notes[1]))


# ---- HTML

# One style sheet for the export and the page: light and dark by the reader's setting, printable
# (collapsed parts stay collapsed on paper; the page's controls are not printed).
PAGE_CSS = """
:root{color-scheme:light dark;--bg:#fbfbfa;--fg:#1f2328;--muted:#6a737d;--line:#e3e3e0;--card:#fff;
--user:#eef4ff;--accent:#2f6fd6;--mark:#fff2a8;--code:#f4f4f2}
@media (prefers-color-scheme:dark){:root{--bg:#15171a;--fg:#e6e6e6;--muted:#9aa1a9;--line:#2c3036;
--card:#1c1f23;--user:#1b2535;--accent:#7aa7ff;--mark:#5b4d12;--code:#202328}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif}
a{color:var(--accent)}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;font-size:13px}
pre{white-space:pre-wrap;word-break:break-word;background:var(--code);padding:8px 10px;border-radius:6px;margin:6px 0}
mark{background:var(--mark);color:inherit;border-radius:2px;padding:0 1px}
.session{max-width:980px;margin:0 auto;padding:16px 20px 48px}
.session h1{font-size:22px;margin:4px 0 8px}
.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px;color:var(--muted);margin:0 0 12px}
.meta dd{margin:0;color:var(--fg);word-break:break-all}
.resume{display:flex;gap:8px;align-items:center;margin:0 0 14px}
button{font:inherit;font-size:13px;padding:4px 12px;border:1px solid var(--line);border-radius:6px;
background:var(--card);color:var(--fg);cursor:pointer}button:hover{border-color:var(--accent)}
.resume code{background:var(--code);padding:4px 8px;border-radius:6px;flex:1;overflow-x:auto;white-space:nowrap}
.chunk{margin:10px 0;padding:8px 12px;border:1px solid var(--line);border-radius:8px;background:var(--card);
content-visibility:auto;contain-intrinsic-size:auto 90px}
.chunk.user{background:var(--user)}
.chunk .who{font-weight:600;font-size:13px}
.chunk .when,.chunk .seq{color:var(--muted);font-size:12px;margin-left:8px;text-decoration:none}
.chunk .text{white-space:pre-wrap;word-break:break-word;margin-top:4px}
details.chunk{padding:6px 12px}
details.chunk>summary{cursor:pointer;color:var(--muted);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
details.chunk>summary .who{color:var(--fg)}
details.chunk.thinking,details.chunk.context{border-style:dashed}
.chunk.hit{outline:2px solid var(--accent)}
.omitted{color:var(--muted);font-style:italic;margin:10px 0}
.subs{font-size:13px;margin:0 0 12px}
@media print{body{background:#fff;color:#000}.chunk{break-inside:avoid;content-visibility:visible}
.noprint,button{display:none}details.chunk>summary{white-space:normal}}
"""


def _attr_id(seq):
    return "c%d" % seq


def html_chunk(c):
    """One chunk as HTML, every text escaped; tool calls, thinking and context collapsed."""
    c, e, who = dict(c, text=visible(c["text"])), html.escape, _chunk_who(c)  # terminal escapes: shown as ^[
    when = '<span class="when">%s</span>' % e(_when(c["timestamp"]).strip()) if c["timestamp"] else ""
    seq = '<a class="seq" href="#%s">#%d</a>' % (_attr_id(c["seq"]), c["seq"])
    kind = c["kind"] if re.fullmatch(r"\w+", c["kind"] or "") else "other"
    if c["kind"] in COLLAPSIBLE:
        if c["kind"] == "tool":
            args, result, output = _tool_parts(c)
            body = ("<pre>%s</pre>" % e(args) if args else "") + (
                '<div class="who">%s</div><pre>%s</pre>' % (e(result), e(output)) if result else "")
        else:
            body = '<div class="text">%s</div>' % e(c["text"])
        return ('<details class="chunk %s" id="%s"><summary><span class="who">%s</span> %s%s <span class="mono">%s</span>'
                '</summary>%s</details>\n' % (kind, _attr_id(c["seq"]), e(who), when, seq,
                                               e(collapse(c["kind"], c["text"])), body))
    return '<section class="chunk %s" id="%s"><span class="who">%s</span>%s%s<div class="text">%s</div></section>\n' % (
        kind, _attr_id(c["seq"]), e(who), when, seq, e(c["text"]))


def html_header(h, link=None, children=()):
    """The session's header: name, facts, resume command; `link(session_id)` makes the parent and
    the sub-agents links (the page), else they are text (an exported file)."""
    e = html.escape
    rows = [("agent", h["agent"]), ("cwd", h["cwd"]), ("created", short_date(h["created"])),
            ("modified", short_date(h["modified"])), ("session", h["sessionId"]), ("file", h["path"]),
            ("summary", h.get("summary")), ("messages", h["chunkCount"])]
    out = ['<h1>%s</h1><dl class="meta">' % e(h.get("title") or h["name"] or "Unnamed session")]
    out += ["<dt>%s</dt><dd>%s</dd>" % (k, e(str(v))) for k, v in rows if v not in (None, "")]
    out.append("</dl>")
    if h["resumeCommand"]:
        out.append('<div class="resume"><code id="resume">%s</code>%s</div>' % (
            e(h["resumeCommand"]), '<button class="noprint" id="copy" type="button">Copy</button>' if link else ""))
    subs = []
    if h["parent"]:
        subs.append("sub-agent of %s" % ('<a href="%s">%s</a>' % (e(link(h["parent"])), e(h["parent"]))
                                          if link else e(h["parent"])))
    if children:
        subs.append("sub-agents: " + ", ".join('<a href="%s">%s</a>' % (e(link(sid)), e(name or sid)) if link
                                                else e(name or sid) for sid, name in children))
    if subs:
        out.append('<div class="subs">%s</div>' % " · ".join(subs))
    return "".join(out) + "\n"


def session_fragment(data, link=None, children=()):
    """The session as the HTML inside <main>: what the export's body and the page's view show."""
    note = lambda text: '<p class="omitted">%s</p>\n' % html.escape(text) if text else ""  # noqa: E731
    return "".join([html_header(data["session"], link, children), note(_omitted_note(data, True))]
                   + [html_chunk(c) for c in data["chunks"]] + [note(_omitted_note(data, False))])


def show_html(data, max_chars=0):
    """`sesame show --format html`: one self-contained page; no script, and a policy that lets it load
    nothing (a saved file opened in a browser makes no request, whatever the transcript holds)."""
    def page(body):
        return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
                '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">\n'
                '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                '<title>%s</title>\n<style>%s</style></head>\n<body><main class="session">\n%s</main></body></html>\n'
                % (html.escape(data["session"].get("title") or data["session"]["name"] or "Unnamed session"), PAGE_CSS, body))
    return page(session_fragment(_fit_export(data, max_chars, html_chunk, page(html_header(data["session"])))))


def export_session(data, fmt, max_chars=0):
    return (show_html if EXPORT_FORMATS[fmt] == "html" else show_markdown)(data, max_chars)


def write_export(text, output, force):
    """Write an export to `output` ("-" or None: stdout); an existing file is kept unless force."""
    if output in (None, "-"):
        sys.stdout.write(text)
        return
    try:
        with open(output, "w" if force else "x", encoding="utf-8", newline="\n") as f:
            f.write(text)
    except FileExistsError:
        raise SesameError("%s exists; add --force to replace it" % output, kind="exists") from None
    except OSError as e:
        raise SesameError("cannot write %s: %s" % (output, e.strerror or e)) from None
    _stderr("sesame: wrote %s" % output)


# ---- The local page

SERVE_HOST = "127.0.0.1"
SERVE_REFRESH_SECONDS = MCP_REFRESH_SECONDS
SERVE_LIMIT = 30  # results the page lists
# A session id can hold almost anything ("copilot_stage0/[x]"); what the page refuses is what
# makes it a path out of the index's reach: a ".." step, a leading "/", "\" or "~", a control character.
_NOT_AN_ID = LazyPattern(r"[\x00-\x1f\x7f]|(^|[/\\])\.\.([/\\]|$)|^[/\\~]")


def page_search(ctx, params):
    """The page's search: search_sessions() with the CLI's filters (the page's query string)."""
    get = lambda k: (params.get(k) or [""])[0].strip() or None  # noqa: E731
    tools = params.get("tool") or None
    data = search_sessions(ctx, get("q") or "", limit=SERVE_LIMIT, refresh=False, cwd=get("cwd"),
                           after=get("after"), before=get("before"), agent=get("agent"),
                           tools=get("tools") == "1", tool=tools, path=get("path"), host=get("host"))
    # The page marks matches from their offsets, given as [text, matched] pieces (a session's own `**`
    # stays text; JavaScript counts string offsets otherwise than Python)
    for r in data["results"]:
        text, pos, parts = r.get("matchedSnippet") or "", 0, []
        for start, end in r.pop("matchedHighlights", None) or ():
            parts += [[text[pos:start], False], [text[start:end], True]]
            pos = end
        r["matchedParts"] = [p for p in parts + [[text[pos:], False]] if p[0]]
        for m in r.get("matches") or ():
            m.pop("highlights", None)
    return data


def page_session(ctx, ref, params):
    """The page's session view: show_session() whole (or --around), rendered as the HTML export's body,
    with its sub-agents; a reference that is not an id (a path, "..") is refused."""
    if not ref.strip() or _NOT_AN_ID.search(ref):
        raise UsageError("not a session id: %r" % ref[:80])
    data = show_session(ctx, ref, everything=True, refresh=False)
    store = ctx.store()
    try:
        children = store.child_sessions(data["session"]["sessionId"])
    finally:
        store.close()
    link = lambda sid: "#session=" + urllib_quote(sid)  # noqa: E731
    return {"session": data["session"], "html": session_fragment(data, link, children),
            "children": [{"sessionId": sid, "name": name} for sid, name in children]}


def urllib_quote(s):
    import urllib.parse
    return urllib.parse.quote(s, safe="")


PAGE_SCRIPT = r"""
const $ = s => document.querySelector(s);
const q = $('#q'), list = $('#results'), view = $('#view'), note = $('#note');
let timer = 0, ticket = 0, active = -1;
function marked(parts) {
  const frag = document.createDocumentFragment();
  (parts || []).forEach(([text, hit]) => {
    text = text.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, c => '^' + String.fromCharCode(c.charCodeAt(0) ^ 64));
    if (hit) { const m = document.createElement('mark'); m.textContent = text; frag.append(m); }
    else frag.append(text);
  });
  return frag;
}
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
function params() {
  const p = new URLSearchParams();
  if (q.value.trim()) p.set('q', q.value);
  for (const id of ['agent', 'cwd', 'after', 'before']) { const v = $('#' + id).value.trim(); if (v) p.set(id, v); }
  if ($('#tools').checked) p.set('tools', '1');
  return p;
}
function select(i) {
  const items = list.querySelectorAll('li');
  if (!items.length) return;
  active = Math.max(0, Math.min(items.length - 1, i));
  items.forEach((li, j) => li.classList.toggle('active', j === active));
  items[active].scrollIntoView({block: 'nearest'});
}
async function search() {
  const mine = ++ticket, p = params();
  history.replaceState(null, '', (p.toString() ? '?' + p : location.pathname) + location.hash);
  if (!p.get('q')) { list.replaceChildren(); note.textContent = 'Type to search your sessions.'; return; }
  note.textContent = 'Searching…';
  const r = await fetch('/api/search?' + p), d = await r.json();
  if (mine !== ticket) return;
  if (!r.ok) { list.replaceChildren(); note.textContent = d.error.message; return; }
  note.textContent = d.resultCount ? d.resultCount + (d.hasMore ? '+' : '') + (d.resultCount === 1 ? ' session' : ' sessions')
    : 'No session matches.';
  list.replaceChildren(...d.results.map((res, i) => {
    const li = el('li'), a = el('a'), seq = res.matches && res.matches.length ? res.matches[0].seq : '';
    a.href = '#session=' + encodeURIComponent(res.shortId || res.sessionId) + (seq !== '' ? '&seq=' + seq : '');
    a.append(el('span', 'name', res.title || res.name || 'Unnamed session'), el('span', 'facts', [res.agent, (res.modified || '').slice(0, 10), res.cwd || ''].join(' · ')));
    const snip = el('span', 'snippet'); snip.append(marked(res.matchedParts)); a.append(snip);
    li.append(a); return li;
  }));
  active = -1;
  if (d.results.length) select(0);
}
async function open() {
  const h = new URLSearchParams(location.hash.slice(1)), id = h.get('session');
  if (!id) { view.replaceChildren(el('p', 'omitted', 'Open a result to read the session.')); return; }
  view.replaceChildren(el('p', 'omitted', 'Loading…'));
  const r = await fetch('/api/session/' + encodeURIComponent(id)), d = await r.json();
  if (!r.ok) { view.replaceChildren(el('p', 'omitted', d.error.message)); return; }
  view.innerHTML = d.html;  // rendered and escaped by the server (session_fragment)
  document.title = (d.session.title || d.session.name || 'Unnamed session') + ' · Sesame';
  const copy = $('#copy');
  if (copy) copy.onclick = () => navigator.clipboard.writeText($('#resume').textContent).then(() => { copy.textContent = 'Copied'; });
  const hit = h.get('seq') && document.getElementById('c' + h.get('seq'));
  if (hit) {
    hit.classList.add('hit'); if (hit.tagName === 'DETAILS') hit.open = true;
    // Off-screen messages are laid out lazily (content-visibility): their real heights move the
    // target as it comes into view, so it is aimed at again once they are known.
    hit.scrollIntoView({block: 'center'});
    requestAnimationFrame(() => requestAnimationFrame(() => hit.scrollIntoView({block: 'center'})));
  }
  else view.scrollTop = 0;
}
q.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(search, 120); });
for (const id of ['agent', 'cwd', 'after', 'before', 'tools']) $('#' + id).addEventListener('change', search);
document.addEventListener('keydown', ev => {
  const typing = ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement.tagName);
  if (ev.key === '/' && !typing) { ev.preventDefault(); q.focus(); q.select(); }
  else if (ev.key === 'ArrowDown' && (document.activeElement === q || !typing)) { ev.preventDefault(); select(active + 1); }
  else if (ev.key === 'ArrowUp' && (document.activeElement === q || !typing)) { ev.preventDefault(); select(active - 1); }
  else if (ev.key === 'Enter' && active >= 0 && (document.activeElement === q || !typing)) {
    const a = list.querySelectorAll('li a')[active]; if (a) { ev.preventDefault(); location.hash = a.getAttribute('href').slice(1); }
  } else if (ev.key === 'Escape') q.focus();
});
window.addEventListener('hashchange', open);
const start = new URLSearchParams(location.search);
q.value = start.get('q') || '';
for (const id of ['agent', 'cwd', 'after', 'before']) $('#' + id).value = start.get(id) || '';
$('#tools').checked = start.get('tools') === '1';
search(); open();
"""

PAGE_LAYOUT_CSS = """
.app{display:grid;grid-template-columns:minmax(300px,420px) 1fr;height:100vh}
.side{border-right:1px solid var(--line);display:flex;flex-direction:column;min-height:0}
.bar{padding:12px;border-bottom:1px solid var(--line)}
.bar h2{font-size:15px;margin:0 0 8px;letter-spacing:.02em}.bar h2 span{color:var(--muted);font-weight:400}
#q{width:100%;font-size:16px;padding:8px 10px;border:1px solid var(--line);border-radius:8px;background:var(--card);color:var(--fg)}
.filters{display:grid;grid-template-columns:1fr 1fr;gap:6px;margin-top:8px;font-size:13px}
.filters label{display:flex;gap:6px;align-items:center;color:var(--muted)}
.filters input,.filters select{width:100%;padding:4px 6px;border:1px solid var(--line);border-radius:6px;background:var(--card);color:var(--fg)}
.filters input[type=checkbox]{width:auto}
#note{color:var(--muted);font-size:13px;margin:8px 0 0}
#results{list-style:none;margin:0;padding:0;overflow-y:auto;flex:1}
#results a{display:block;padding:10px 12px;border-bottom:1px solid var(--line);color:inherit;text-decoration:none}
#results li.active a,#results a:hover{background:var(--user)}
#results .name{display:block;font-weight:600}
#results .facts{display:block;font-size:12px;color:var(--muted);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#results .snippet{display:block;font-size:13px;margin-top:2px;overflow-wrap:anywhere}
#view{overflow-y:auto;min-height:0}
kbd{border:1px solid var(--line);border-radius:4px;padding:0 4px;font-size:12px}
@media (max-width:760px){.app{grid-template-columns:1fr;height:auto}#view{overflow:visible}}
@media print{.side{display:none}.app{display:block;height:auto}}
"""


def page_html(nonce, agents):
    """The page: search on the left, the open session on the right; script and style by nonce."""
    options = "".join('<option value="%s">%s</option>' % (html.escape(a), html.escape(a)) for a in agents)
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>Sesame</title>\n'
            '<style nonce="%(n)s">%(css)s%(layout)s</style></head>\n<body><div class="app">\n'
            '<aside class="side noprint"><div class="bar"><h2>Sesame <span>· press <kbd>/</kbd> to search, '
            '<kbd>↑</kbd><kbd>↓</kbd> <kbd>Enter</kbd> to open</span></h2>\n'
            '<input id="q" type="search" placeholder="Search sessions…" autocomplete="off" autofocus>\n'
            '<div class="filters"><select id="agent"><option value="">any agent</option>%(options)s</select>'
            '<input id="cwd" placeholder="cwd (folder)"><input id="after" placeholder="after (7d, 2025-01-31)">'
            '<input id="before" placeholder="before"><label><input id="tools" type="checkbox"> tool calls only</label></div>\n'
            '<p id="note"></p></div><ul id="results"></ul></aside>\n'
            '<main id="view" class="session"></main></div>\n'
            '<script nonce="%(n)s">%(js)s</script></body></html>\n'
            % {"n": nonce, "css": PAGE_CSS, "layout": PAGE_LAYOUT_CSS, "options": options, "js": PAGE_SCRIPT})


def page_csp(nonce):
    """Nothing but this page's own script and style, and requests to itself."""
    return ("default-src 'none'; script-src 'nonce-%s'; style-src 'nonce-%s'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'" % (nonce, nonce))


class PageServer:
    """`sesame serve`: the page and its JSON API on 127.0.0.1, for the user who started it only.

    Other local users and any web page open in the same browser can reach a loopback port, so every
    request must carry the random token printed in the URL (then kept in an HttpOnly, SameSite=Strict
    cookie), compared in constant time; the Host header must be this address and port (a DNS
    rebinding page has its own name there); only GET is answered, and no CORS header is ever sent."""

    def __init__(self, port=0, env=None):
        import http.server
        import secrets
        import threading
        self.token = secrets.token_urlsafe(32)
        self.env = env
        self.stop = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            server_version = "sesame"
            sys_version = ""

            def do_GET(self):  # noqa: N802 (http.server's naming)
                server.answer(self)

            def __getattr__(self, name):  # every other method (POST, PUT, OPTIONS, ...): 405
                if name.startswith("do_"):
                    return lambda: server.send(self, 405, {"error": {"code": "method", "message": "only GET"}},
                                               extra={"Allow": "GET"})
                raise AttributeError(name)

            def log_message(self, fmt, *args):
                pass  # no request log: the URLs hold search words

        self.httpd = http.server.ThreadingHTTPServer((SERVE_HOST, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.cookie = "sesame_%d" % self.port  # one per port: two servers' tokens do not overwrite each other

    @property
    def url(self):
        return "http://%s:%d/?token=%s" % (SERVE_HOST, self.port, self.token)

    def context(self):
        return Context(env=self.env, warn=_quiet)

    def send(self, h, status, body, ctype="application/json; charset=utf-8", extra=None, nonce=None):
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else to_json(body)).encode("utf-8")
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Content-Security-Policy", page_csp(nonce) if nonce else "default-src 'none'; frame-ancestors 'none'")
        h.send_header("X-Content-Type-Options", "nosniff")
        h.send_header("Referrer-Policy", "no-referrer")
        h.send_header("Cache-Control", "no-store")
        h.send_header("X-Frame-Options", "DENY")
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _refuse(self, h, status, message):
        self.send(h, status, {"error": {"code": "refused", "message": message}})

    def answer(self, h):
        import hmac
        import urllib.parse
        if h.headers.get("Host") not in ("%s:%d" % (SERVE_HOST, self.port), SERVE_HOST if self.port == 80 else None):
            return self._refuse(h, 421, "this server answers only at %s:%d" % (SERVE_HOST, self.port))
        url = urllib.parse.urlsplit(h.path)
        params = urllib.parse.parse_qs(url.query)
        given = (params.pop("token", None) or [""])[0]
        if given:
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return self._refuse(h, 403, "wrong token: open the URL sesame serve printed")
            # The token leaves the address bar (and the history) for the cookie.
            rest = urllib.parse.urlencode(params, doseq=True)
            return self.send(h, 303, b"", "text/plain", extra={
                "Location": url.path + ("?" + rest if rest else ""),
                "Set-Cookie": "%s=%s; HttpOnly; SameSite=Strict; Path=/" % (self.cookie, self.token)})
        jar = {}
        for part in (h.headers.get("Cookie") or "").split(";"):
            k, _, v = part.strip().partition("=")
            jar[k] = v
        if not hmac.compare_digest(jar.get(self.cookie, "").encode(), self.token.encode()):
            return self._refuse(h, 403, "no token: open the URL sesame serve printed")
        path = urllib.parse.unquote(url.path)
        try:
            if url.path == "/":
                import secrets
                nonce = secrets.token_urlsafe(16)
                return self.send(h, 200, page_html(nonce, list(PARSERS)), "text/html; charset=utf-8", nonce=nonce)
            if url.path == "/api/search":
                return self.send(h, 200, page_search(self.context(), params))
            if url.path.startswith("/api/session/"):
                return self.send(h, 200, page_session(self.context(), path[len("/api/session/"):], params))
        except SesameError as e:
            return self.send(h, 404 if e.kind == "not_found" else 400, error_json(e))
        except sqlite3.DatabaseError as e:
            return self.send(h, 503, {"error": {"code": "index", "message": "the index is busy or unusable: %s" % e}})
        except Exception as e:  # noqa: BLE001  (one request's failure is that request's answer)
            _stderr("sesame serve: %s failed:\n%s" % (url.path, _traceback()))
            return self.send(h, 500, {"error": {"code": "internal", "message": "%s failed: %s" % (url.path, e)}})
        return self._refuse(h, 404, "no such page")

    def serve(self, open_query=None):
        """Serve until interrupted, the index refreshed in the background as the MCP server's is."""
        import threading
        threading.Thread(target=_keep_fresh, args=(self.stop, SERVE_REFRESH_SECONDS), daemon=True).start()
        if open_query is not None:
            import urllib.parse
            import webbrowser
            url = self.url + ("&q=" + urllib.parse.quote(open_query) if open_query else "")
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        try:
            self.httpd.serve_forever()
        finally:
            self.stop.set()
            self.httpd.server_close()


def serve_page(ctx, port=0, open_query=None):
    """Refresh the index once, print the URL, serve until Ctrl-C."""
    first_use = not os.path.exists(ctx.index_path)
    store = ctx.store()
    try:
        refresh_before_reading(ctx, store, first_use)
    finally:
        store.close()
    try:
        server = PageServer(port, ctx.env)
    except OSError as e:
        raise SesameError("cannot serve on %s:%d: %s" % (SERVE_HOST, port, e.strerror or e)) from None
    print("sesame: serving on %s (Ctrl-C stops)" % server.url, flush=True)
    try:
        server.serve(open_query)
    except KeyboardInterrupt:
        pass
    return EXIT_OK



# ==================================================================================================
# Setup: wiring Sesame into agents
# ==================================================================================================
#
# `sesame setup` adds Sesame's MCP server (and SKILL.md where an agent reads skills) to the agents
# found on this machine, and `--undo` takes out exactly that. Where the agent has its own command
# (`claude mcp add`, ...), it is used; otherwise Sesame edits the agent's config file itself, and
# edits only the one key or table it adds: comments, key order and spacing elsewhere stay byte for
# byte, through the two small editors below (JSONC, TOML; YAML for Goose and Hermes). Every change
# is written atomically with the previous file kept beside it (FILE.sesame-backup), and recorded in
# Sesame's data dir (setup.json) with the file's bytes before and a hash of them after: undo puts
# the old bytes back while the file is still as Sesame left it, and otherwise removes only the
# entry, after checking that it still points where Sesame put it.

SETUP_NAME = "sesame"          # the server's name in every agent's config
SETUP_BACKUP = ".sesame-backup"


class SetupAgent:
    """One agent Sesame can be wired into: where its MCP config is (a function of the environment),
    the config's format ("json", "toml", "yaml", or None: no MCP), the keys leading to its table of
    servers, how one server entry looks there, the agent's own add/remove commands (argv before the
    server's command; None: none), and the folder it reads skills from (None: none)."""

    def __init__(self, id, label, discover, config=None, fmt=None, keys=(), entry=None, cli=None, cli_remove=None,
                 skills=None, checked="", folder=None):
        self.id, self.label, self.discover, self.config, self.fmt = id, label, discover, config, fmt
        # the agent's own folder: found when it exists (default: the config file's folder)
        self.folder = folder or (lambda env: os.path.dirname(config(env)))
        self.keys, self.entry, self.cli, self.cli_remove, self.skills = keys, entry, cli, cli_remove, skills
        self.checked = checked


def _std_entry(command, args):
    """The entry most agents share (Claude Desktop's `mcpServers` shape)."""
    return {"command": command, "args": args}


def _vscode_storage(env, extension):
    """A VS Code extension's globalStorage folder (Linux, macOS)."""
    base = (os.path.join(_home(env), "Library", "Application Support", "Code") if sys.platform == "darwin"
            else os.path.join(env_path(env, "XDG_CONFIG_HOME") or os.path.join(_home(env), ".config"), "Code"))
    return os.path.join(base, "User", "globalStorage", extension)


def _xdg_config(env, *parts):
    return os.path.join(env_path(env, "XDG_CONFIG_HOME") or os.path.join(_home(env), ".config"), *parts)


def _kimi_dir(env):
    # Kimi Code (the newer CLI) keeps ~/.kimi-code, kimi-cli ~/.kimi: the one that exists
    new = agent_dir(env, "KIMI_CODE_HOME", ".kimi-code")
    return new if os.path.isdir(new) else os.path.join(_home(env), ".kimi")


# The agents, each with its source. Paths are the user-level ones (every project, not one repo's).
# `discover` is the agent's parser id: the agent counts as found where `sources` finds it, or where
# its config folder exists (an agent installed but not used yet).
SETUP_AGENTS = [
    # docs.claude.com/en/docs/claude-code/mcp ("user scope": ~/.claude.json, top-level mcpServers);
    # skills: docs.claude.com/en/docs/claude-code/skills (~/.claude/skills/NAME/SKILL.md)
    SetupAgent("claude", "Claude Code", "claude", lambda e: os.path.join(env_path(e, "CLAUDE_CONFIG_DIR") or _home(e),
               ".claude.json"), "json", ("mcpServers",),
               _std_entry, ["claude", "mcp", "add", "--scope", "user", SETUP_NAME, "--"],
               ["claude", "mcp", "remove", "--scope", "user", SETUP_NAME],
               lambda e: os.path.join(agent_dir(e, "CLAUDE_CONFIG_DIR", ".claude"), "skills"), "2.1.197 and 2.1.332",
               lambda e: agent_dir(e, "CLAUDE_CONFIG_DIR", ".claude")),
    # developers.openai.com/codex/mcp ($CODEX_HOME/config.toml, [mcp_servers.NAME] command, args);
    # skills: developers.openai.com/codex/skills (user skills in $HOME/.agents/skills, the open
    # standard's folder; Gemini CLI and Copilot CLI read it too, and the same name is one skill there)
    SetupAgent("codex", "Codex", "codex", lambda e: os.path.join(agent_dir(e, "CODEX_HOME", ".codex"), "config.toml"),
               "toml", ("mcp_servers",), _std_entry, ["codex", "mcp", "add", SETUP_NAME, "--"],
               ["codex", "mcp", "remove", SETUP_NAME],
               lambda e: os.path.join(_home(e), ".agents", "skills"), "0.169.0"),
    # google-gemini/gemini-cli docs/tools/mcp-server.md (~/.gemini/settings.json, mcpServers; `gemini
    # mcp add --scope user`); skills: docs/cli/using-agent-skills.md ("User Skills: ~/.gemini/skills")
    SetupAgent("gemini", "Gemini CLI", "gemini", lambda e: os.path.join(_home(e), ".gemini", "settings.json"), "json",
               ("mcpServers",), _std_entry, ["gemini", "mcp", "add", "--scope", "user", SETUP_NAME],
               ["gemini", "mcp", "remove", "--scope", "user", SETUP_NAME],
               lambda e: os.path.join(_home(e), ".gemini", "skills"), "0.61.0"),
    # QwenLM/qwen-code docs (a Gemini CLI fork: ~/.qwen/settings.json, mcpServers, `qwen mcp add`;
    # skills in ~/.qwen/skills)
    SetupAgent("qwen", "Qwen Code", "qwen", lambda e: os.path.join(_home(e), ".qwen", "settings.json"), "json",
               ("mcpServers",), _std_entry, ["qwen", "mcp", "add", "--scope", "user", SETUP_NAME],
               ["qwen", "mcp", "remove", "--scope", "user", SETUP_NAME],
               lambda e: os.path.join(_home(e), ".qwen", "skills"), "0.15.10 and 0.24.4"),
    # opencode.ai/docs/mcp-servers ("mcp": {NAME: {"type": "local", "command": [...]}}) and
    # opencode.ai/docs/config (~/.config/opencode/opencode.json); skills: opencode.ai/docs/skills
    SetupAgent("opencode", "OpenCode", "opencode", lambda e: _xdg_config(e, "opencode", "opencode.json"), "json",
               ("mcp",), lambda c, a: {"type": "local", "command": [c] + a},
               skills=lambda e: _xdg_config(e, "opencode", "skills"), checked="1.18.33"),
    # cursor.com/docs/context/mcp (~/.cursor/mcp.json, mcpServers)
    SetupAgent("cursor", "Cursor", "cursor", lambda e: os.path.join(_home(e), ".cursor", "mcp.json"), "json",
               ("mcpServers",), _std_entry, checked="docs, 2026"),
    # cline/cline src/core/storage/disk.ts (settings/cline_mcp_settings.json in the extension's
    # globalStorage); Roo Code and Kilo Code (its forks) name it settings/mcp_settings.json
    SetupAgent("cline", "Cline (VS Code)", "cline",
               lambda e: os.path.join(_vscode_storage(e, "saoudrizwan.claude-dev"), "settings", "cline_mcp_settings.json"),
               "json", ("mcpServers",), _std_entry, checked="source, 2026",
               folder=lambda e: _vscode_storage(e, "saoudrizwan.claude-dev")),
    SetupAgent("roo", "Roo Code (VS Code)", None,
               lambda e: os.path.join(_vscode_storage(e, "rooveterinaryinc.roo-cline"), "settings", "mcp_settings.json"),
               "json", ("mcpServers",), _std_entry, checked="source, 2026",
               folder=lambda e: _vscode_storage(e, "rooveterinaryinc.roo-cline")),
    SetupAgent("kilocode", "Kilo Code (VS Code)", None,
               lambda e: os.path.join(_vscode_storage(e, "kilocode.kilo-code"), "settings", "mcp_settings.json"),
               "json", ("mcpServers",), _std_entry, checked="source, 2026",
               folder=lambda e: _vscode_storage(e, "kilocode.kilo-code")),
    # docs.github.com/en/copilot/how-tos/copilot-cli/customize-copilot/add-mcp-servers
    # (~/.copilot/mcp-config.json, mcpServers, "type": "local", "tools": ["*"]; `/mcp add` is interactive);
    # skills: .../copilot-cli/customize-copilot/add-skills ("personal skills": ~/.copilot/skills)
    SetupAgent("copilot", "GitHub Copilot CLI", "copilot", lambda e: os.path.join(_home(e), ".copilot", "mcp-config.json"),
               "json", ("mcpServers",), lambda c, a: {"type": "local", "command": c, "args": a, "tools": ["*"]},
               skills=lambda e: os.path.join(_home(e), ".copilot", "skills"), checked="docs, 2026"),
    # charmbracelet/crush README ("mcp": {NAME: {"type": "stdio", "command", "args"}} in
    # ~/.config/crush/crush.json)
    SetupAgent("crush", "Crush", "crush", lambda e: _xdg_config(e, "crush", "crush.json"), "json", ("mcp",),
               lambda c, a: {"type": "stdio", "command": c, "args": a}, checked="README, 2026"),
    # block/goose docs: ~/.config/goose/config.yaml, extensions: NAME: {cmd, args, enabled, type: stdio, ...}
    SetupAgent("goose", "Goose", "goose", lambda e: _xdg_config(e, "goose", "config.yaml"), "yaml", ("extensions",),
               lambda c, a: {"name": SETUP_NAME, "type": "stdio", "cmd": c, "args": a, "enabled": True,
                             "envs": {}, "timeout": 300}, checked="docs, 2026"),
    # ampcode.com/manual ("amp.mcpServers" in ~/.config/amp/settings.json)
    SetupAgent("amp", "Amp", "amp", lambda e: _xdg_config(e, "amp", "settings.json"), "json", ("amp.mcpServers",),
               _std_entry, checked="manual, 2026"),
    # docs.factory.ai/cli/configuration/mcp (~/.factory/mcp.json, mcpServers, "type": "stdio");
    # skills: docs.factory.ai (~/.factory/skills)
    SetupAgent("droid", "Factory Droid", "droid", lambda e: os.path.join(_home(e), ".factory", "mcp.json"), "json",
               ("mcpServers",), lambda c, a: {"type": "stdio", "command": c, "args": a},
               skills=lambda e: os.path.join(_home(e), ".factory", "skills"), checked="docs, 2026"),
    # moonshotai.github.io/kimi-cli/en/customization/mcp and reference/kimi-mcp (~/.kimi/mcp.json,
    # mcpServers; `kimi mcp add --transport stdio NAME -- COMMAND...`); Kimi Code: ~/.kimi-code/mcp.json
    SetupAgent("kimi", "Kimi", "kimi", lambda e: os.path.join(_kimi_dir(e), "mcp.json"), "json", ("mcpServers",),
               _std_entry, ["kimi", "mcp", "add", "--transport", "stdio", SETUP_NAME, "--"],
               ["kimi", "mcp", "remove", SETUP_NAME], checked="docs, 2026"),
    # pi has no MCP by design (badlogic/pi-mono coding-agent README); it reads skills from
    # ~/.pi/agent/skills
    SetupAgent("pi", "pi", "pi", skills=lambda e: os.path.join(agent_dir(e, "PI_CODING_AGENT_DIR", ".pi", "agent"),
                                                                  "skills"), checked="0.73",
               folder=lambda e: agent_dir(e, "PI_CODING_AGENT_DIR", ".pi", "agent")),
    # hermes-agent website/docs/user-guide/features/mcp.md (v0.22: ~/.hermes/config.yaml, mcp_servers:
    # NAME: {command, args}); skills in ~/.hermes/skills
    SetupAgent("hermes", "Hermes", "hermes", lambda e: os.path.join(_home(e), ".hermes", "config.yaml"), "yaml",
               ("mcp_servers",), _std_entry, skills=lambda e: os.path.join(_home(e), ".hermes", "skills"),
               checked="0.22 (docs)"),
    # Aider has no MCP client (aider.chat/docs); it reads a conventions file given with `read:` in
    # ~/.aider.conf.yml (aider.chat/docs/usage/conventions.html)
    SetupAgent("aider", "Aider", "aider", lambda e: os.path.join(_home(e), ".aider.conf.yml"), checked="0.86.2",
               folder=lambda e: os.path.join(_home(e), ".aider.conf.yml")),
]
SETUP_BY_ID = {a.id: a for a in SETUP_AGENTS}


class SetupError(SesameError):
    kind = "setup"


def _sha(data):
    import hashlib
    return hashlib.sha256(data).hexdigest()


def _shown(env, path):
    """A path as printed: the home folder as ~."""
    home = _home(env).rstrip(os.sep)
    return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def sesame_command():
    """How an agent starts this Sesame: the absolute path of this file when it can be run (the
    installed command), else this Python with the file's path."""
    path = os.path.abspath(__file__)
    if os.access(path, os.X_OK):
        return path, ["mcp"]
    return sys.executable, [path, "mcp"]


# --- A minimal JSONC editor: where every key and value is, so that one member can be added,
# --- replaced or removed by splicing the text; the rest of the file is never re-serialised.

def _jsonc_tree(text):
    """The file's objects with positions: comments and trailing commas are blanked by jsonc_to_json
    (which keeps every character's position), so positions in the blanked text are positions in the
    user's text. Returns the top value's node; objects are {"start", "end", "members": [(key,
    key_start, value_start, value_end, node)]}. Raises ValueError on what JSON does not allow."""
    s = jsonc_to_json(text)
    json.loads(s)  # the error message and its line come from json itself
    ws = re.compile(r"\s*")
    from json.decoder import scanstring

    def value(i):
        i = ws.match(s, i).end()
        c = s[i]
        if c == "{":
            node, j, members = {"start": i, "members": []}, i + 1, []
            while True:
                j = ws.match(s, j).end()
                if s[j] == "}":
                    break
                key, k_end = scanstring(s, j + 1)
                colon = ws.match(s, k_end).end()
                v_start = ws.match(s, colon + 1).end()
                v_end, child = value(v_start)
                members.append((key, j, v_start, v_end, child))
                j = ws.match(s, v_end).end()
                if s[j] == ",":
                    j += 1
            node["members"], node["end"] = members, j + 1
            return j + 1, node
        if c == "[":
            j = i + 1
            while True:
                j = ws.match(s, j).end()
                if s[j] == "]":
                    return j + 1, None
                j, _ = value(j)
                j = ws.match(s, j).end()
                if s[j] == ",":
                    j += 1
        if c == '"':
            return scanstring(s, i + 1)[1], None
        return re.compile(r"-?[\w.+-]+").match(s, i).end(), None

    return value(0)[1], s


def _line_start(text, i):
    return text.rfind("\n", 0, i) + 1


def _indent_at(text, i):
    start = _line_start(text, i)
    return text[start:start + len(text[start:]) - len(text[start:].lstrip(" \t"))]


def _indent_unit(text):
    m = re.search(r"\n([ \t]+)\S", text)
    return m.group(1) if m else "  "


def jsonc_set(text, keys, value):
    """The text with keys[-1] set to value inside the objects keys[:-1] (created where missing);
    everything else byte for byte. Returns (new text, keys created: the first missing one or None)."""
    if not text.strip():
        obj = value
        for k in reversed(keys):
            obj = {k: obj}
        return json.dumps(obj, indent=2) + "\n", keys[0]
    root, _ = _jsonc_tree(text)
    if root is None:
        raise ValueError("the file is not a JSON object")
    node, depth = root, 0
    while depth < len(keys):
        found = [m for m in node["members"] if m[0] == keys[depth]]
        if not found:
            break
        member = found[-1]
        if depth == len(keys) - 1:  # replace the value (--force)
            ind = _indent_at(text, member[1])
            rendered = json.dumps(value, indent=_indent_unit(text)).replace("\n", "\n" + ind)
            return text[:member[2]] + rendered + text[member[3]:], None
        if member[4] is None:
            raise ValueError("%r is not an object" % keys[depth])
        node, depth = member[4], depth + 1
    created = keys[depth]
    obj = value
    for k in reversed(keys[depth + 1:]):
        obj = {k: obj}
    return _jsonc_insert(text, node, keys[depth], obj), created


def _jsonc_insert(text, node, key, value):
    """Add `"key": value` as the last member of the object `node`."""
    unit = _indent_unit(text)
    close = node["end"] - 1
    members = node["members"]
    if members and text.count("\n", members[0][1], close) == 0 and text.count("\n", node["start"], members[0][1]) == 0:
        # an object on one line stays on one line
        at = members[-1][3]
        return text[:at] + ", " + json.dumps(key) + ": " + json.dumps(value) + text[at:]
    ind = _indent_at(text, members[-1][1]) if members else _indent_at(text, node["start"]) + unit
    rendered = json.dumps(key) + ": " + json.dumps(value, indent=unit).replace("\n", "\n" + ind)
    if not members:
        outer = _indent_at(text, node["start"])
        return text[:node["start"] + 1] + "\n" + ind + rendered + "\n" + outer + text[close:]
    last_end = members[-1][3]
    gap = text[last_end:close]
    trailing = "," in re.sub(r"//[^\n]*|/\*.*?\*/", "", gap, flags=re.S)  # a trailing comma already there
    nl = text.find("\n", last_end, close)
    for comment in re.finditer(r"/\*.*?\*/", gap, flags=re.S):  # not inside a comment over several lines
        if comment.start() <= nl - last_end < comment.end():
            nl = text.find("\n", last_end + comment.end(), close)
    head = text[:last_end] + ("" if trailing else ",")
    if nl < 0:  # the closing brace follows on the same line
        return head + gap.rstrip() + "\n" + ind + rendered + gap[len(gap.rstrip()):] + text[close:]
    return head + text[last_end:nl] + "\n" + ind + rendered + ("," if trailing else "") + text[nl:]


def jsonc_remove(text, keys, drop_empty=None):
    """The text without the member keys[-1] (inside keys[:-1]); `drop_empty` names a container key
    (one of keys[:-1], created by Sesame) to remove as well when nothing else was put in it."""
    text = _jsonc_cut_path(text, keys)
    if drop_empty in keys[:-1]:
        d = keys.index(drop_empty)
        empty = {}
        for k in reversed(keys[d + 1:-1]):
            empty = {k: empty}
        if jsonc_get(text, keys[:d + 1]) == empty:
            text = _jsonc_cut_path(text, keys[:d + 1])
    return text


def _jsonc_cut_path(text, keys):
    root, blank = _jsonc_tree(text)
    node, parent, member = root, None, None
    for k in keys:
        found = [m for m in (node or {"members": []})["members"] if m[0] == k]
        if not found:
            return text
        parent, member = node, found[-1]
        node = member[4]
    return _jsonc_cut(text, blank, parent, member)


def _jsonc_cut(text, blank, parent, member):
    members = parent["members"]
    i = members.index(member)
    key_start, v_end = member[1], member[3]
    line = _line_start(text, key_start)
    own_line = not text[line:key_start].strip()
    start = line - 1 if own_line and line > 0 else key_start
    if i + 1 < len(members):  # not the last: up to the next member
        nxt = members[i + 1][1]
        nline = _line_start(text, nxt)
        end = nline - 1 if not text[nline:nxt].strip() and nline > v_end else nxt
        return text[:start] + text[end:]
    own_comma = re.match(r"[ \t]*,", text[v_end:])  # its own trailing comma (JSONC)
    comma_end = v_end + own_comma.end() if own_comma else v_end
    if i == 0:  # the only member
        close = parent["end"] - 1
        if not text[parent["start"] + 1:key_start].strip() and not text[comma_end:close].strip():
            return text[:parent["start"] + 1] + text[close:]
        return text[:start] + text[comma_end:]
    if text[v_end:comma_end].strip():  # its own trailing comma: the one before it stays (the file's style)
        return text[:start] + text[comma_end:]
    prev_end = members[i - 1][3]
    comma = blank.find(",", prev_end, key_start)
    between = text[prev_end:key_start]
    if between == blank[prev_end:key_start] and not own_line:  # nothing but space and the comma
        return text[:prev_end] + text[comma_end:]
    return text[:comma] + text[comma + 1:start] + text[comma_end:]


def jsonc_get(text, keys):
    """The value at keys (None when absent)."""
    value = json.loads(jsonc_to_json(text)) if text.strip() else {}
    for k in keys:
        if not isinstance(value, dict) or k not in value:
            return None
        value = value[k]
    return value


# --- A minimal TOML editor: Sesame's entry is one table, [<keys>.sesame], appended at the end of
# --- the file and removed with its lines; the rest of the file is not touched.

def _toml_header(keys):
    """The header line of the table [keys] (keys bare or quoted, spaces allowed around the dots)."""
    return re.compile(r"(?m)^[ \t]*\[[ \t]*%s[ \t]*\][ \t]*(#.*)?$" % r"[ \t]*\.[ \t]*".join(
        "(?:%s|\"%s\"|'%s')" % ((re.escape(k),) * 3) for k in keys))


def _toml_value(value):
    return json.dumps(value) if isinstance(value, (str, list)) else str(value).lower()


def toml_table(keys, entry):
    """[keys] and its `key = value` lines (strings and lists as JSON writes them: valid TOML)."""
    return "[%s]\n%s" % (".".join(keys), "".join("%s = %s\n" % (k, _toml_value(v)) for k, v in entry.items()))


def toml_check(text):
    """Refuse a file TOML does not allow (with tomllib, Python 3.11+; older Pythons check nothing)."""
    try:
        import tomllib
    except ImportError:
        return
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(str(e))


def _toml_span(text, keys):
    """Where the table [keys] and its sub-tables are: (start, end) or None."""
    m = _toml_header(keys).search(text)
    if not m:
        return None
    prefix = ".".join(keys) + "."
    for n in re.finditer(r"(?m)^[ \t]*\[\[?([^\]\n]*)\]", text[m.end():]):
        if not re.sub(r"[\s\"']", "", n.group(1)).startswith(prefix):
            return m.start(), m.end() + n.start()
    return m.start(), len(text)


def toml_get(text, keys):
    """The table at keys as a dict (strings and lists of strings read), or None."""
    try:
        import tomllib
        value = tomllib.loads(text)
        for k in keys:
            if not isinstance(value, dict) or k not in value:
                return None
            value = value[k]
        return value
    except ImportError:
        span = _toml_span(text, keys)
        if span is None:
            return None
        table = {}
        for line in text[span[0]:span[1]].splitlines()[1:]:
            k, eq, v = line.partition("=")
            if eq:
                try:
                    table[k.strip()] = json.loads(v.split(" #")[0].strip())
                except ValueError:
                    table[k.strip()] = v.strip()
        return table


def toml_set(text, keys, entry):
    """The text with the table [keys] appended (or, there already, replaced in place); returns
    (new text, the first key created)."""
    span = _toml_span(text, keys)
    table = toml_table(keys, entry)
    if span is not None:  # --force: the table replaced in place
        return text[:span[0]] + table + ("\n" if span[1] < len(text) else "") + text[span[1]:], None
    if toml_get(text, keys) is not None:
        raise ValueError("%s is not a table of its own (an inline table?): change it by hand" % ".".join(keys))
    # a blank line before it, as `codex mcp add` writes it
    sep = "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
    try:
        toml_check(text + sep + table)
    except ValueError:  # `mcp_servers = {...}` written inline cannot take a [mcp_servers.sesame] table
        raise ValueError("%s is an inline table here: add the entry by hand" % ".".join(keys[:-1]))
    return text + sep + table, keys[0]


def toml_remove(text, keys, drop_empty=None):
    """The text without the table [keys] and its sub-tables (a TOML table leaves no container
    behind, so drop_empty has nothing to do)."""
    span = _toml_span(text, keys)
    if span is None:
        return text
    start, end = span
    if end == len(text) and text[:start].endswith("\n\n"):
        start -= 1  # the blank line Sesame put before it
    return text[:start] + text[end:]


# --- A minimal YAML editor (Goose, Hermes): Sesame's entry is one block under a top-level key.

def _yaml_block(text, key):
    """(line index of `key:`, index after its block, child indent) of a top-level block, or None."""
    lines = text.splitlines(True)
    for i, line in enumerate(lines):
        m = re.match(r"%s:[ \t]*(#.*)?$" % re.escape(key), line.rstrip("\r\n"))
        if m:
            j, indent = i + 1, None
            while j < len(lines) and (not lines[j].strip() or lines[j].lstrip().startswith("#")
                                      or lines[j][0] in " \t" or lines[j].startswith("- ")):
                if indent is None and lines[j].strip() and not lines[j].lstrip().startswith("#"):
                    indent = lines[j][:len(lines[j]) - len(lines[j].lstrip(" "))]
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1
            return i, j, indent or "  "
        if re.match(r"%s:[ \t]*\{\}[ \t]*(#.*)?$" % re.escape(key), line.rstrip("\r\n")):
            return None  # `key: {}`, as agents write an empty table: no entries (yaml_set opens it)
        if re.match(r"%s:" % re.escape(key), line):
            raise ValueError("%r is not a block mapping (an inline value?): change it by hand" % key)
    return None


def _yaml_child(lines, i, j, indent, name):
    for n in range(i + 1, j):
        if re.match(r"%s(%s|\"%s\"|'%s'):[ \t]*(#.*)?$" % (re.escape(indent), name, name, name), lines[n].rstrip("\r\n")):
            end = n + 1
            while end < j and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip(" ")) > len(indent)):
                end += 1
            while end > n + 1 and not lines[end - 1].strip():
                end -= 1
            return n, end
    return None


def yaml_check(text):
    """What Sesame can tell without a YAML parser: tabs in indentation are not YAML."""
    if "\t" in "".join(l[:len(l) - len(l.lstrip())] for l in text.splitlines()):
        raise ValueError("tabs in indentation (YAML allows only spaces)")


def _yaml_entry(indent, name, entry):
    def scalar(v):
        return "{}" if v == {} else json.dumps(v)
    return "%s%s:\n%s" % (indent, name, "".join("%s%s%s: %s\n" % (indent, indent, k, scalar(v)) for k, v in entry.items()))


def yaml_get(text, keys, name):
    """The entry `name` under the top-level block keys[0], its `key: value` lines read as JSON
    values where they are (Sesame writes them so), or None."""
    block = _yaml_block(text, keys[0])
    if block is None:
        return None
    lines = text.splitlines(True)
    child = _yaml_child(lines, *block, name)
    if child is None:
        return None
    entry = {}
    for line in lines[child[0] + 1:child[1]]:
        k, _, v = line.strip().partition(":")
        try:
            entry[k] = json.loads(v.strip())
        except ValueError:
            entry[k] = v.strip().strip("'\"")
    return entry


def yaml_set(text, keys, name, entry):
    """The text with the block `name:` added at the end of the top-level block keys[0] (created
    at the end of the file where missing), indented as its other entries."""
    empty = re.search(r"(?m)^%s:[ \t]*\{\}([ \t]*#[^\r\n]*)?$" % re.escape(keys[0]), text)
    if empty:  # `key: {}` becomes `key:` with the one entry under it
        entry_text = _yaml_entry("  ", name, entry).rstrip("\n")
        return text[:empty.start()] + keys[0] + ":" + (empty.group(1) or "") + "\n" + entry_text + text[empty.end():], None
    block = _yaml_block(text, keys[0])
    lines = text.splitlines(True)
    if block is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + "%s:\n%s" % (keys[0], _yaml_entry("  ", name, entry)), keys[0]
    i, j, indent = block
    child = _yaml_child(lines, i, j, indent, name)
    if child is not None:
        return "".join(lines[:child[0]]) + _yaml_entry(indent, name, entry) + "".join(lines[child[1]:]), None
    if j > 0 and not lines[j - 1].endswith("\n"):
        lines[j - 1] += "\n"
    return "".join(lines[:j]) + _yaml_entry(indent, name, entry) + "".join(lines[j:]), None


def yaml_remove(text, keys, name, drop_empty=None):
    """The text without the block `name:` (and keys[0] when Sesame created it and it is empty)."""
    block = _yaml_block(text, keys[0])
    if block is None:
        return text
    lines = text.splitlines(True)
    child = _yaml_child(lines, *block, name)
    if child is None:
        return text
    del lines[child[0]:child[1]]
    if drop_empty == keys[0]:
        i = block[0]
        if i + 1 >= len(lines) or (lines[i + 1].strip() and lines[i + 1][0] not in " \t#"):
            del lines[i]
    return "".join(lines)


# --- One agent's MCP entry through the format's editor.

def _entry_get(agent, text):
    if agent.fmt == "json":
        return jsonc_get(text, agent.keys + (SETUP_NAME,))
    if agent.fmt == "toml":
        return toml_get(text, agent.keys + (SETUP_NAME,))
    return yaml_get(text, agent.keys, SETUP_NAME)


def _entry_set(agent, text, entry):
    if agent.fmt == "json":
        return jsonc_set(text, agent.keys + (SETUP_NAME,), entry)
    if agent.fmt == "toml":
        return toml_set(text, agent.keys + (SETUP_NAME,), entry)
    return yaml_set(text, agent.keys, SETUP_NAME, entry)


def _entry_remove(agent, text, created):
    if agent.fmt == "json":
        return jsonc_remove(text, agent.keys + (SETUP_NAME,), created)
    if agent.fmt == "toml":
        return toml_remove(text, agent.keys + (SETUP_NAME,), created)
    return yaml_remove(text, agent.keys, SETUP_NAME, created)


def _check(agent, text):
    """ValueError when the file is not of the agent's format (Sesame then leaves it alone)."""
    if agent.fmt == "json":
        if text.strip():
            _jsonc_tree(text)
            if not isinstance(json.loads(jsonc_to_json(text)), dict):
                raise ValueError("not a JSON object")
    elif agent.fmt == "toml":
        toml_check(text)
    else:
        yaml_check(text)


def _command_of_entry(entry):
    """(command, args) an entry starts, whatever the agent's shape."""
    if not isinstance(entry, dict):
        return None
    command = entry.get("command", entry.get("cmd"))
    if isinstance(command, list):
        return (command[0], list(command[1:])) if command else None
    return command, list(_list(entry.get("args")))


def _read_text(path):
    """(bytes, text) of a config file, or (None, "") when there is none. A BOM stays in the bytes."""
    try:
        with open_regular(path) as f:
            data = f.read()
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        raise SetupError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        return data, data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SetupError("%s: not UTF-8 text; left unchanged" % path)


def _encode(original, text):
    return (b"\xef\xbb\xbf" if original and original.startswith(b"\xef\xbb\xbf") else b"") + text.encode("utf-8")


def _writable(path):
    """A clear error for a file or folder Sesame cannot write, before anything is written."""
    folder = os.path.dirname(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    # the file, and the folder the new file is written in and renamed over it
    for target in ([path] if os.path.exists(path) else []) + [folder]:
        if not os.access(target, os.W_OK) or not os.stat(target).st_mode & stat.S_IWUSR:  # root ignores the mode
            raise SetupError("%s is read-only; nothing was changed" % target, hint="make it writable, or add the entry by hand")


def write_atomic(path, data, backup=None):
    """Write data to path through a temporary file beside it (never half-written), keeping the file's
    mode; `backup` (bytes) is written first to path + SETUP_BACKUP."""
    _writable(path)
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else 0o600
    if backup is not None:
        _write_file(path + SETUP_BACKUP, backup, mode)
    _write_file(path, data, mode)


def _write_file(path, data, mode):
    tmp = "%s.%d.sesame-tmp" % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise SetupError("cannot write %s: %s; nothing was changed" % (path, e.strerror or e))


# --- The record of what setup added (Sesame's data dir, setup.json)

def setup_record_path(env):
    return os.path.join(data_dir(env), "setup.json")


def load_setup_record(env):
    try:
        with open_regular(setup_record_path(env)) as f:
            record = json.loads(f.read().decode("utf-8"))
        return record if isinstance(record, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise SetupError("cannot read %s: %s" % (setup_record_path(env), e), hint="fix or delete that file")


def save_setup_record(env, record):
    path = setup_record_path(env)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    _write_file(path, json.dumps(record, indent=1).encode("utf-8"), 0o600)


# --- Planning, applying, undoing

def _skill_source():
    """SKILL.md beside this file, or beside the file a symlink to it points to (the repository's
    copy); None when there is none."""
    for folder in (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.realpath(__file__))):
        if os.path.isfile(os.path.join(folder, "SKILL.md")):
            return os.path.join(folder, "SKILL.md")
    return None


def _diff(path, before, after, env):
    import difflib
    name = _shown(env, path)
    return "".join(difflib.unified_diff((before or "").splitlines(True), after.splitlines(True),
                                        "a/" + name.lstrip("/~"), "b/" + name.lstrip("/~")))


def _found(agent, env):
    """Found where `sources` finds the agent's sessions, or where its own folder exists."""
    parser = PARSERS.get(agent.discover)
    places = (parser.default_roots(env) if parser else []) + [agent.folder(env)]
    return any(os.path.exists(p) for p in places)


def _cli_path(agent, env):
    if not agent.cli:
        return None
    import shutil
    return shutil.which(agent.cli[0], path=env.get("PATH"))


def plan_agent(agent, env, force=False, command=None, added=()):
    """What setup would change for one agent: a list of changes, each a dict with "kind" ("mcp",
    "skill", "note"), "path", "state" ("add", "replace", "done", "conflict", "error", "manual"),
    and for additions the file's text before and after ("before", "after") and "via". `added` is
    what setup added to this agent before (its record): an entry or a SKILL.md of Sesame's own
    that is out of date (Sesame moved, a newer SKILL.md) is updated without --force."""
    command, args = command or sesame_command()
    changes = []

    def earlier(kind, path):
        return next((r for r in added if r["kind"] == kind and r["path"] == path), None)
    if agent.fmt:
        path = agent.config(env)
        change = {"kind": "mcp", "path": path, "via": "file"}
        entry = agent.entry(command, args)
        try:
            raw, text = _read_text(path)
            _check(agent, text)
            current = _entry_get(agent, text)
            change["before"] = text if raw is not None else None
            if current is not None and _command_of_entry(current) == (command, args):
                change["state"] = "done"
            elif current is not None and not force and not (
                    earlier("mcp", path) and _command_of_entry(current) == _command_of_entry(earlier("mcp", path)["entry"])):
                where = _command_of_entry(current)
                change.update(state="conflict", message="an entry %r already runs %s; left alone (--force replaces it)"
                              % (SETUP_NAME, " ".join(map(str, [where[0]] + where[1])) if where else "something else"))
            else:
                after, created = _entry_set(agent, text, entry)
                _writable(path)  # said now, so that nothing of this agent is changed
                change.update(state="replace" if current is not None else "add", after=after, created=created,
                              entry=entry)
                cli = _cli_path(agent, env)
                if cli and current is None and not earlier("mcp", path):
                    change.update(via="cli", argv=[cli] + agent.cli[1:] + [command] + args)
        except SetupError as e:
            change.update(state="error", message=e.message)
        except (ValueError, IndexError, RecursionError) as e:
            change.update(state="error", message="%s: cannot be parsed (%s); left unchanged" % (path, str(e).split("\n")[0]))
        changes.append(change)
    elif agent.id == "aider":
        changes.append({"kind": "note", "path": agent.config(env), "state": "manual",
                        "message": "Aider has no MCP support; to give it the skill as a conventions file, add this "
                                   "line to %s: read: %s" % (_shown(env, agent.config(env)),
                                                             _skill_source() or "/path/to/SKILL.md")})
    if agent.skills:
        path = os.path.join(agent.skills(env), SETUP_NAME, "SKILL.md")
        source = _skill_source()
        change = {"kind": "skill", "path": path, "via": "file"}
        if source is None:
            change.update(state="manual", message="no SKILL.md beside %s to copy: put it there (or run setup from "
                                                   "a symlink to the repository's sesame.py)" % os.path.abspath(__file__))
        else:
            with open(source, encoding="utf-8") as f:
                skill = f.read()
            raw, text = _read_text(path)
            try:
                if raw is None or (text != skill and force):
                    _writable(path)
            except SetupError as e:
                change.update(state="error", message=e.message)
            if change.get("state"):
                pass
            elif raw is None:
                change.update(state="add", before=None, after=skill)
            elif text == skill:
                change["state"] = "done"
            elif force or (earlier("skill", path) and _sha(raw) == earlier("skill", path)["after"]):
                change.update(state="replace", before=text, after=skill)
            else:
                change.update(state="conflict", message="%s differs from Sesame's SKILL.md; left alone (--force "
                                                        "replaces it)" % _shown(env, path))
        changes.append(change)
    return changes


def _run_cli(argv, env):
    """Run an agent's own command; None when it succeeded, else what went wrong (one line)."""
    import subprocess
    try:
        # run from the home folder: Gemini CLI and Qwen Code register the folder they run in as a project
        p = subprocess.run(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=SETUP_CLI_TIMEOUT, cwd=_home(env))
    except (OSError, subprocess.TimeoutExpired) as e:
        return "%s: %s" % (argv[0], e)
    if p.returncode:
        said = p.stdout.decode("utf-8", "replace").strip().splitlines()
        return "`%s` exited with %d%s" % (" ".join(map(os.path.basename, argv[:3])), p.returncode,
                                           ": " + said[-1] if said else "")
    return None


SETUP_CLI_TIMEOUT = 120  # seconds an agent's `mcp add` may take (Node start-up on a busy machine)


def _missing_dirs(path):
    """The folders above path that do not exist yet, deepest first (undo removes them again)."""
    missing, folder = [], os.path.dirname(path)
    while folder and not os.path.exists(folder) and folder != os.path.dirname(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def apply_change(change, agent, env):
    """Make one planned change; returns the record undo needs: hashes of the file's bytes before
    (None: there was no file; the bytes themselves are in the backup beside it, not copied into
    Sesame's data dir: an agent's config can hold credentials) and after, the entry, the folders
    created."""
    path = change["path"]
    raw, _ = _read_text(path)
    dirs = _missing_dirs(path)
    if change.get("via") == "cli":
        _writable(path)
        failed = _run_cli(change["argv"], env)
        new_raw, new_text = _read_text(path)
        try:
            added = new_raw is not None and _command_of_entry(_entry_get(agent, new_text)) == _command_of_entry(change["entry"])
        except ValueError:
            added = False
        if failed or not added:
            if new_raw != raw:  # whatever the command did goes back before Sesame edits the file itself
                write_atomic(path, raw) if raw is not None else os.remove(path)
            change["via"], change["cliFailed"] = "file", failed or "it did not add the entry"
            return apply_change(change, agent, env)
        if raw is not None:
            write_atomic(path + SETUP_BACKUP, raw)
    else:
        write_atomic(path, _encode(raw, change["after"]), backup=None if change.get("earlier") else raw)
        new_raw = _read_text(path)[0]
    return {"kind": change["kind"], "path": path, "via": change["via"], "created": change.get("created"),
            "entry": change.get("entry"), "before": _sha(raw) if raw is not None else None,
            "after": _sha(new_raw), "backup": path + SETUP_BACKUP if raw is not None else None, "dirs": dirs}


def undo_change(item, agent, env):
    """Take out what one record says was added. Returns (state, message)."""
    path = item["path"]
    raw, text = _read_text(path)
    backup = item.get("backup")
    before = _read_text(backup)[0] if backup else None
    if before is not None and _sha(before) != item["before"]:
        before = backup = None  # the backup is not the file Sesame saw: it cannot be put back
    if raw is None:
        return "gone", "%s no longer exists" % _shown(env, path)
    if _sha(raw) == item["after"] and (before is not None or item["before"] is None):  # as Sesame left it
        _writable(path)
        if before is None:
            os.remove(path)
            for folder in item.get("dirs") or []:
                try:
                    os.rmdir(folder)
                except OSError:
                    break  # something else is in it now
        else:
            write_atomic(path, before)
        _remove_backup(backup, before)
        return ("restored", "back as it was") if before is not None else ("removed", "Sesame had created it")
    if item["kind"] == "skill":
        return "changed", "%s was changed since; left alone" % _shown(env, path)
    try:
        _check(agent, text)
        current = _entry_get(agent, text)
    except ValueError as e:
        return "error", "%s: cannot be parsed (%s); left unchanged" % (path, str(e).split("\n")[0])
    if current is None:
        _remove_backup(backup, before)
        return "gone", "no %r entry left in %s" % (SETUP_NAME, _shown(env, path))
    if _command_of_entry(current) != _command_of_entry(item["entry"]):
        return "changed", "the %r entry in %s was changed since; left alone" % (SETUP_NAME, _shown(env, path))
    cli = _cli_path(agent, env) if item.get("via") == "cli" else None
    if not (cli and _run_cli([cli] + agent.cli_remove[1:], env) is None and _entry_get(agent, _read_text(path)[1]) is None):
        raw, text = _read_text(path)
        write_atomic(path, _encode(raw, _entry_remove(agent, text, item.get("created"))))
    _remove_backup(backup, before)
    return "removed", "only the %r entry: the file was changed since setup, the rest is kept" % SETUP_NAME


def _remove_backup(backup, before):
    if backup and before is not None:
        os.remove(backup)


def _select(names, everything, candidates):
    if everything:
        return candidates
    unknown = [n for n in names if n not in SETUP_BY_ID]
    if unknown:
        import difflib
        close = difflib.get_close_matches(unknown[0], list(SETUP_BY_ID), 1)
        raise UsageError("unknown agent %r%s" % (unknown[0], "; did you mean %r?" % close[0] if close else ""),
                         hint="the agents are %s" % ", ".join(SETUP_BY_ID))
    return [SETUP_BY_ID[n] for n in names]


def setup_request(ctx, params):
    """What `sesame setup` does, as data. params: agents (ids), all, dry_run, undo, force.
    Without agents or --all (and without --undo) nothing is changed: the plan is returned."""
    env = ctx.env
    names, everything = params.get("agents") or [], params.get("all", False)
    if params.get("undo"):
        return _undo_request(env, names, everything, params.get("dry_run", False))
    found = [a for a in SETUP_AGENTS if _found(a, env)]
    chosen = _select(names, everything, found)
    apply = bool(names or everything) and not params.get("dry_run")
    command, args = sesame_command()
    record = load_setup_record(env)
    result = {"command": [command] + args, "applied": apply, "agents": []}
    for agent in (chosen if names or everything else found):
        changes = plan_agent(agent, env, params.get("force", False), (command, args), record.get(agent.id, ()))
        blocked = any(c["state"] == "error" for c in changes)  # one agent's changes are made together or not at all
        for change in changes:
            if change["state"] in ("add", "replace") and apply and blocked:
                change.update(state="skipped", message="not made either, because of the error above")
            elif change["state"] in ("add", "replace"):
                if change["kind"] == "skill" and change.get("before") is None:
                    change["message"] = "a copy of %s (%d lines)" % (_skill_source(), change["after"].count("\n"))
                else:
                    change["diff"] = _diff(change["path"], change.get("before"), change["after"], env)
                if apply:
                    try:
                        old = [r for r in record.get(agent.id, []) if r["path"] == change["path"] and r["kind"] == change["kind"]]
                        change["earlier"] = bool(old) and change["state"] == "replace"
                        done = apply_change(change, agent, env)
                        if change["earlier"]:  # Sesame's own change updated: undo still goes back to before it
                            done.update({k: old[0].get(k) for k in ("before", "backup", "dirs", "created")})
                        kept = [r for r in record.get(agent.id, []) if r["path"] != done["path"] or r["kind"] != done["kind"]]
                        record[agent.id] = kept + [done]
                        save_setup_record(env, record)
                        change["state"] = "added" if change["state"] == "add" else "replaced"
                    except SetupError as e:
                        change.update(state="error", message=e.message)
        result["agents"].append({"agent": agent.id, "name": agent.label, "checked": agent.checked,
                                 "changes": [_public(c, env) for c in changes]})
    return result


def _public(change, env):
    out = {k: change[k] for k in ("kind", "state", "via", "message", "diff", "cliFailed") if k in change}
    out["path"] = _shown(env, change["path"])
    if change.get("argv"):
        out["command"] = change["argv"]
    return out


def _undo_request(env, names, everything, dry_run):
    record = load_setup_record(env)
    ids = list(record) if everything or not names else [a.id for a in _select(names, False, [])]
    result = {"undo": True, "applied": not dry_run, "agents": []}
    for agent_id in ids:
        agent = SETUP_BY_ID.get(agent_id)
        items = record.get(agent_id, [])
        if agent is None or not items:
            result["agents"].append({"agent": agent_id, "changes": [{"kind": "note", "state": "none",
                                     "message": "nothing was added by sesame setup"}]})
            continue
        changes, left = [], []
        for item in reversed(items):
            if dry_run:
                changes.append({"kind": item["kind"], "path": _shown(env, item["path"]), "state": "would undo"})
                continue
            try:
                state, message = undo_change(item, agent, env)
            except SetupError as e:
                state, message = "error", e.message
            if state in ("error",):
                left.append(item)
            changes.append({"kind": item["kind"], "path": _shown(env, item["path"]), "state": state, "message": message})
        if not dry_run:
            if left:
                record[agent_id] = list(reversed(left))
            else:
                record.pop(agent_id, None)
            save_setup_record(env, record)
        result["agents"].append({"agent": agent_id, "name": agent.label, "changes": changes})
    return result


def wiring_status(env):
    """Per agent found, whether Sesame is wired in: its MCP entry ("wired", "elsewhere": an entry
    named sesame that runs something else, "absent", "unreadable", None: no MCP) and its skill."""
    command = sesame_command()
    rows = []
    for agent in SETUP_AGENTS:
        if not _found(agent, env):
            continue
        row = {"agent": agent.id, "name": agent.label, "mcp": None, "skill": None}
        if agent.fmt:
            try:
                raw, text = _read_text(agent.config(env))
                current = _entry_get(agent, text) if raw is not None else None
                row["mcp"] = ("absent" if current is None else "wired" if _command_of_entry(current) == command
                              else "elsewhere")
            except (SetupError, ValueError, IndexError, RecursionError):
                row["mcp"] = "unreadable"
        if agent.skills:
            row["skill"] = os.path.exists(os.path.join(agent.skills(env), SETUP_NAME, "SKILL.md"))
        rows.append(row)
    return rows


# --- Human text

SETUP_STATES = {"add": "would add", "replace": "would replace", "added": "added", "replaced": "replaced",
                "done": "already there", "conflict": "left alone", "error": "not changed", "manual": "by hand",
                "skipped": "not changed"}


def setup_text(result, dry_run=False):
    """`sesame setup` as text: per agent, each change and its state; diffs with --dry-run."""
    out = []
    if not result["agents"]:
        out.append("No agents found. `sesame sources` lists where Sesame looks.\n")
    for a in result["agents"]:
        out.append("%s (%s)\n" % (a.get("name") or a["agent"], a["agent"]))
        for c in a["changes"]:
            state = SETUP_STATES.get(c["state"], c["state"])
            what = {"mcp": "MCP server", "skill": "skill", "note": "note"}[c["kind"]]
            line = "  %-10s %-14s %s" % (what, state, c.get("path") or "")
            if c.get("command") and c.get("via") == "cli" and c["state"] in ("add", "added"):
                line += "  (with `%s`)" % " ".join([os.path.basename(c["command"][0])] + c["command"][1:3])
            out.append(line.rstrip() + "\n")
            if c.get("message"):
                out.append("             %s\n" % c["message"])
            if c.get("cliFailed"):
                out.append("             the agent's command did not do it (%s): the file was edited\n" % c["cliFailed"])
            if dry_run and c.get("diff"):
                out.append("".join("    " + l for l in c["diff"].splitlines(True)))
    if not result.get("undo") and not result["applied"] and any(
            c["state"] in ("add", "replace") for a in result["agents"] for c in a["changes"]):
        out.append("\nRun `sesame setup AGENT...` or `sesame setup --all` to apply, --dry-run to see each change"
                   "; `sesame setup --undo` takes it out again.\n")
    return visible("".join(out))

def wiring_text(rows):
    """The part of `sesame status` that says, per agent found, whether Sesame is wired in."""
    if not rows:
        return ""
    out = ["\nWired into agents (`sesame setup` adds what is missing):\n"]
    for r in rows:
        mcp = {None: "no MCP", "wired": "MCP: yes", "absent": "MCP: no", "elsewhere": "MCP: a 'sesame' entry runs "
               "something else", "unreadable": "MCP: config unreadable"}[r["mcp"]]
        skill = "" if r["skill"] is None else ", skill: %s" % ("yes" if r["skill"] else "no")
        out.append("  %-10s %s%s\n" % (r["agent"], mcp, skill))
    return "".join(out)



# ==================================================================================================
# Commands and CLI
# ==================================================================================================
#
# One formatter per command (cmd_*): it runs the command's request with the parsed arguments and
# prints the data, as text or with --json as JSON. The command table (COMMANDS) below names, for every
# command, its options, request and formatters; the usage lists, argparse, quick_args and the MCP
# server's tools are made from it, and main() runs any command the same way.


WATCH_MAX_PAUSE = 300.0   # the longest a watch waits after a failed round (full disk) before trying again


def cmd_mcp(args, ctx):
    return serve_mcp()


def cmd_remote(args, ctx):
    if args.action not in ("add", "list", "remove"):
        raise UsageError("unknown remote action %r: add, list or remove" % args.action)
    if args.action != "list" and not args.name:
        raise UsageError("remote %s needs a NAME" % args.action, hint="sesame remote add devbox --host me@devbox")
    if args.action == "add":
        data = remote_add(ctx.env, args.name, args.host, args.agents, args.projects)
        text = "added %s (ssh %s); `sesame sync %s` copies its sessions into %s\n" % (
            data["name"], data["host"], data["name"], data["mirror"])
    elif args.action == "remove":
        data = remote_remove(ctx.env, args.name)
        text = "removed %s, its copied sessions and their index entries\n" % args.name
    else:
        data = {"remotes": remote_list(ctx.env)}
        text = remote_list_text(data["remotes"])
    if args.json:
        emit_json(data)
    else:
        sys.stdout.write(visible(text))
    return EXIT_OK


def cmd_sync(args, ctx):
    """Copy the remotes' sessions and index them; exit 1 (one line per remote) when one failed."""
    if not ctx.remotes:
        raise UsageError("no remotes to sync", hint="sesame remote add NAME --host SSH_HOST")
    data = sync_request(ctx, args.names, note=_stderr)
    if args.json:
        emit_json(data)
    else:
        sys.stdout.write(sync_text(data))
    failed = [r for r in data["remotes"] if not r["ok"]]
    for r in failed:
        _stderr(visible("sesame: sync %s: %s" % (r["name"], r["error"])))
    return EXIT_ERROR if failed else EXIT_OK


def cmd_search(args, ctx):
    if args.fields and not args.json:
        raise UsageError("--fields chooses the fields of the JSON output: add --json")
    if args.json:
        render = lambda d: to_json(d) + "\n"  # noqa: E731
    else:
        color = use_color(sys.stdout, ctx.env)
        render = lambda d: render_results(d, color)  # noqa: E731
    params = cli_params(args)
    sys.stdout.write(fit_budget(search_json(search_request(ctx, params, render)), search_budget(params), render))
    return EXIT_OK


def cmd_show(args, ctx):
    if args.format or args.output or args.force:
        return cmd_export(args, ctx)
    data = show_request(ctx, cli_params(args))
    if args.json:
        emit_json(bound_json(data, SHOW_JSON_MAX_CHARS if args.max_chars is None else args.max_chars))
    else:
        sys.stdout.write(show_text(data, use_color(sys.stdout, ctx.env), args.max_chars or 0))
    return EXIT_OK


def cmd_export(args, ctx):
    if not args.format or args.json:
        raise UsageError("--output and --force go with --format markdown or html" if not args.format else
                         "--format and --json are two outputs: choose one")
    args.all = True  # an export holds everything; what is long is collapsed, not left out
    write_export(export_session(show_request(ctx, cli_params(args)), args.format, args.max_chars or 0), args.output,
                 args.force)
    return EXIT_OK


def cmd_serve(args, ctx):
    return serve_page(ctx, args.port, args.open)


def cmd_index(args, ctx):
    tty = sys.stderr.isatty() and not args.json
    try:
        summary = index_request(ctx, cli_params(args), progress=_progress_printer(sys.stderr) if tty else None)
    finally:
        if tty:
            sys.stderr.write("\r\x1b[K")
    if args.json:
        emit_json(summary.as_json())
    _stderr(summary.line())
    for p in summary.problems[:20] if not args.json else []:
        _stderr("  not indexed: %s: %s" % (escape_breaks(p["path"]), escape_breaks(p["reason"])))
    if len(summary.problems) > 20 and not args.json:
        _stderr("  ... and %d more (sesame index --json lists them all)" % (len(summary.problems) - 20))
    return EXIT_OK


def cmd_watch(args, ctx):
    """Keep the index fresh: an incremental index run every --interval seconds. Between runs it only
    sleeps; a run over unchanged files only stats them, so an idle watch costs almost nothing."""
    if not args.interval > 0:
        raise UsageError("--interval must be a positive number of seconds")
    _stderr("sesame: keeping %s fresh every %gs (Ctrl-C stops)" % (ctx.index_path, args.interval))
    pause = args.interval
    warned = set(ctx.warnings)  # each config warning once, not at every round
    syncer = RemoteSyncer()   # remotes are copied in the background, every remoteSyncSeconds

    def warn_once(message):
        if message not in warned:
            warned.add(message)
            _warn(message)

    # Ctrl-C ends the round at once (KeyboardInterrupt), and the watch in any case: Python loses the
    # exception when the signal lands while a finaliser runs (a file reader dropped half-read, closed
    # by the garbage collector, only prints it), so the loop also checks that Ctrl-C came.
    import signal
    stop = []

    def interrupted(signum, frame):
        stop.append(signum)
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGINT, interrupted)
    except ValueError:  # not the main thread (an embedding program): Ctrl-C stays as it was
        previous = None
    try:
        while not stop:
            try:
                syncer.poke(ctx)
                store = ctx.store()
                try:
                    summary = refresh_index(ctx, store, wait_seconds=0, merge_seconds=COMPACT_WATCH_SECONDS,
                                            every=args.interval)
                finally:
                    store.close()
                if summary is not None and (summary.indexed or summary.removed or summary.problems or summary.merged):
                    _stderr(summary.line())
                pause = args.interval
            except (sqlite3.Error, OSError, SesameError) as e:
                # A full disk, a locked or damaged index: say so, wait longer each time, and go on.
                pause = min(max(pause * 2, args.interval), WATCH_MAX_PAUSE)
                _stderr("sesame: cannot update the index (%s); trying again in %gs" % (getattr(e, "message", e), pause))
            if not stop:
                time.sleep(pause)
                ctx = Context(ctx.env, warn_once)  # pick up config changes; a broken config stops the watch with its error
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return EXIT_OK


def cmd_forget(args, ctx):
    result = forget_request(ctx, cli_params(args))
    if args.json:
        emit_json(result)
    elif args.list:
        items = result["forgotten"]
        for i in items:
            sys.stdout.write(visible("%s  %s  %s  %s" % (escape_breaks(i["sessionId"]), i["agent"],
                                                         escape_breaks(i.get("name") or "Unnamed"), escape_breaks(i.get("path")))) + "\n")
        if not items:
            sys.stdout.write("No session is forgotten (`sesame forget SESSION` removes one from the index).\n")
    else:
        verb, item = next(iter(result.items()))
        sys.stdout.write(visible("%s %s (%s)%s\n" % (
            "forgot" if verb == "forgotten" else "will index again", escape_breaks(item["sessionId"]),
            escape_breaks(item.get("name") or "Unnamed"),
            "" if verb == "forgotten" else " at the next refresh")))
    return EXIT_OK


def cmd_status(args, ctx):
    info = status_request(ctx, cli_params(args))
    info["agentsWired"] = wiring_status(ctx.env)
    if args.json:
        emit_json(info)
    else:
        sys.stdout.write(status_text(info) + wiring_text(info["agentsWired"]))
    return EXIT_OK


def cmd_setup(args, ctx):
    result = setup_request(ctx, {"agents": args.agents, "all": args.all, "dry_run": args.dry_run,
                                 "undo": args.undo, "force": args.force})
    if args.json:
        emit_json(result)
    else:
        sys.stdout.write(setup_text(result, args.dry_run))
    errors = [c["message"] for a in result["agents"] for c in a["changes"] if c["state"] == "error"]
    for message in errors if result["applied"] else ():
        _stderr("sesame: setup: %s" % message)
    return EXIT_ERROR if errors and result["applied"] else EXIT_OK


def cmd_sources(args, ctx):
    data = sources_request(ctx, cli_params(args))
    if args.json:
        emit_json(data)
        return EXIT_OK
    rows = data["sources"]
    for r in rows:
        where = ", ".join("%s%s" % (escape_breaks(l["path"]), "" if l["exists"] else " (absent)") for l in r["locations"]) \
            or ("inside projects (%s): only under a folder the config names" % ", ".join(r["projectFiles"])
                if r["projectFiles"] else "(none)")
        found = "%d file%s" % (r["filesFound"], "" if r["filesFound"] == 1 else "s")
        why = {"skipped": ("not a session file", "not session files"), "unreadable": ("unreadable",) * 2,
               "damaged": ("damaged (its last good sessions kept)",) * 2}
        if r["filesNotIndexed"]:
            found += " (%s)" % ", ".join("%d %s" % (n, why[k][n > 1]) for k, n in r["filesNotIndexed"].items())
        sys.stdout.write(visible("%-12s %-6s %6d sessions  %s  %s\n" % (r["agent"], "active" if r["active"] else "-",
                                                                     r["sessionsIndexed"], found, where)))
    if any(r["filesNotIndexed"] for r in rows):
        sys.stdout.write("\n`sesame status` lists the files not indexed and why.\n")
    unnamed = [r for r in rows if r["projectFiles"] and not r["locations"]]
    if unnamed:   # (nothing says where these are: a user of one of them gets 0 sessions, and why)
        sys.stdout.write("\n%s keep%s history inside each project: name the folder that holds your projects in %s, "
                         'e.g. {"sources": [{"parser": "%s", "path": "~/code"}], "discover": true} ("discover": the '
                         "other agents' default places too).\n"
                         % (", ".join(r["name"] for r in unnamed), "s its" if len(unnamed) == 1 else " their",
                            escape_breaks(data["config"]), unnamed[0]["agent"]))
    return EXIT_OK


# The command table: every command, in the order of `sesame --help` and the usage lists. A new
# command is one entry here, its request (Application) and its formatters (cmd_*, and _mcp_* when
# it is an MCP tool); see Command for the fields.
COMMANDS = {c.name: c for c in (
    Command("search", "WORDS...", "find sessions by what they were about", _search_arguments, search_request,
            cmd_search, tool=SEARCH_TOOL, mcp=_mcp_search, words=True, quick=True),
    Command("show", "SESSION", "read one session (id, id prefix, file or name)", _show_arguments, show_request,
            cmd_show, tool=SHOW_TOOL, mcp=_mcp_show),
    Command("status", "", "what is indexed, from where, how fresh", _add_json, status_request, cmd_status,
            tool=STATUS_TOOL, mcp=_mcp_status),
    Command("sources", "", "every supported agent and where it looks", _add_json, sources_request, cmd_sources),
    Command("index", "", "bring the index up to date (search does it by itself)", _index_arguments,
            index_request, cmd_index),
    Command("watch", "", "keep the index fresh until stopped (Ctrl-C)", _watch_arguments, None, cmd_watch),
    Command("forget", "SESSION", "remove a session from the index and keep it out", _forget_arguments,
            forget_request, cmd_forget),
    Command("mcp", "", "serve search, show and status to agents over MCP", _no_arguments, None, cmd_mcp,
            context=False),
    Command("serve", "[--port N] [--open QUERY]", "a local web page to search and read sessions (127.0.0.1 only)",
            _serve_arguments, None, cmd_serve),
    Command("remote", "add|list|remove [NAME]", "another machine whose sessions are copied over ssh",
            _remote_arguments, None, cmd_remote),
    Command("sync", "[NAME...]", "copy the remotes' sessions over ssh (rsync) and index them", _sync_arguments,
            None, cmd_sync),
    Command("setup", "[AGENT...|--all] [--dry-run] [--undo]", "wire Sesame into your agents (MCP server, skill)",
            _setup_arguments, setup_request, cmd_setup),
)}


def build_parser(command=None):
    """The command line parser. Given the command about to run, only its sub-parser is built:
    building all of them is a start-up cost every invocation would pay."""
    p = argument_parser(prog="sesame", description=__doc__.split("\n\n")[1].replace("\n", " "),
                        epilog="Exit codes: 0 success (also when nothing matched), 1 error, 2 usage error.")
    p.add_argument("--version", action="version", version="sesame " + __version__)
    # prog given: otherwise argparse formats the usage (and asks for the terminal's width) to make it
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(p), prog="sesame")
    for name, c in COMMANDS.items():
        if command in (None, name):
            c.options(sub.add_parser(name, help=c.summary, formatter_class=p.formatter_class))
    return p


def quick_args(argv):
    """The parsed arguments of a plain command line of a `quick` command (`search WORDS... --limit 5
    --json`) without argparse: importing it and building the parser cost ~2 ms of a ~35 ms search.
    Options are read from the same definitions (option_list). Anything else (another command, help,
    options before the command, abbreviated or unknown options, a value that does not convert)
    returns None, and argparse parses it, with its messages; a test checks that both give the same
    arguments."""
    command = COMMANDS.get(argv[0]) if argv else None
    if command is None or not command.quick:
        return None
    spec = option_list(command)
    args = dict(spec.defaults, command=command.name)
    words, i = [], 1
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            words += argv[i:]
            break
        name, eq, value = a.partition("=")
        if name in ("-h", "--help") or (a.startswith("--") and name not in spec.options):
            return None
        if name not in spec.options:
            words.append(a)  # a word, also one that starts with "-" (see _search_argv)
            continue
        dest, takes_value, convert, append = spec.options[name]
        if not takes_value:
            if eq:
                return None
            args[dest] = True
            continue
        if not eq:
            if i >= len(argv) or argv[i].startswith("-"):
                return None  # argparse says what is missing (or takes "-5" as a number)
            value = argv[i]
            i += 1
        try:
            value = convert(value)
        except ValueError:
            return None
        if append:
            args[dest] = (args[dest] or []) + [value]
        else:
            args[dest] = value
    args[spec.positional] = words
    return _Arguments(args)


class _Arguments:
    """Parsed arguments as attributes, like argparse's Namespace."""

    def __init__(self, values):
        self.__dict__.update(values)


def short_usage():
    """What `sesame` alone prints."""
    return ("usage: sesame COMMAND [ARGUMENTS]    (sesame COMMAND --help for one, sesame --help for all)\n\n"
            + usage_lines(COMMANDS))


def _command_of(argv):
    """The command word of argv; unknown or missing ones are usage errors that say what to type."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in COMMANDS or any(a in ("-h", "--help", "--version") for a in argv[:1]):
        return command
    if command is None:
        raise UsageError("no command given%s" % (" for %s" % " ".join(argv) if argv else ""),
                         hint="for example: sesame search nix flake; sesame --help lists every command")
    import difflib
    close = difflib.get_close_matches(command, list(COMMANDS), 1, 0.5)
    raise UsageError("unknown command %r%s" % (command, "; did you mean %r?" % close[0] if close else ""),
                     hint="the commands are %s" % ", ".join(COMMANDS))


def _search_argv(argv, parser, command="search"):
    """Words of a search that look like options but are not ones (`-draft`, sessions without
    "draft") are query words: move them after `--`, where argparse takes anything as a word.
    (For every command whose words may look so: Command.words.)"""
    sub = parser._subparsers._group_actions[0].choices[command]
    takes_value = {o for a in sub._actions for o in a.option_strings if a.nargs != 0}
    known = {o for a in sub._actions for o in a.option_strings}
    options, words, i = [], [], argv.index(command) + 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            words += argv[i + 1:]
            break
        name = a.split("=", 1)[0]
        if a.startswith("--") or name in known:
            options.append(a)
            if name in takes_value and "=" not in a and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
        else:
            words.append(a)
        i += 1
    return argv[:argv.index(command) + 1] + options + ["--"] + words


def error_json(e):
    return {"error": {"code": e.kind, "message": e.message, "hint": e.hint}}


def main(argv=None):
    """Run one sesame command; returns the exit code (tests call this in-process)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # Bytes that are not UTF-8 (a mistyped terminal, a Latin-1 file name) reach Python as lone
    # surrogates, which SQLite refuses; they become U+FFFD, which matches nothing.
    argv = [clean_text(a) for a in argv]
    want_json = "--json" in argv
    try:
        if not argv:
            sys.stdout.write(short_usage())
            return EXIT_USAGE
        args = quick_args(argv)
        if args is None:
            command = _command_of(argv)
            parser = build_parser(command)
            if command in COMMANDS and COMMANDS[command].words:
                argv = _search_argv(argv, parser, command)
            args = parser.parse_args(argv)
        if not args.command:
            sys.stdout.write(short_usage())
            return EXIT_USAGE
        command = COMMANDS[args.command]
        return command.cli(args, Context() if command.context else None)
    except SesameError as e:
        if want_json:
            emit_json(error_json(e))
        _stderr("sesame: %s%s" % (e.message, " (%s)" % e.hint if e.hint else ""))
        return e.code
    except sqlite3.DatabaseError as e:
        msg = str(e).lower()
        if "full" in msg:
            err = StoreError("the disk is full: %s" % e, hint="free some space and run it again; what was written before the disk filled up is kept")
        elif "readonly" in msg or "read-only" in msg:
            err = StoreError("the index cannot be written: %s" % e, hint="check the permissions of %s" % data_dir())
        elif _is_corrupt(e):
            err = StoreError("the index is damaged: %s" % e, hint="rebuild it with `sesame index --full`")
        else:
            err = StoreError("the index is busy or unusable: %s" % e, hint="try again; if it persists run `sesame index --full`")
        if want_json:
            emit_json(error_json(err))
        _stderr("sesame: %s (%s)" % (err.message, err.hint))
        return EXIT_ERROR
    except SystemExit as e:  # argparse printed --help or --version: a code like any command's
        return e.code if isinstance(e.code, int) else EXIT_OK
    except KeyboardInterrupt:
        _stderr("sesame: interrupted")
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK


# The module docstring's usage list is the table's (the docstring is written before the table exists).
__doc__ = __doc__.replace("{usage}\n", usage_lines(COMMANDS, 4))


def leave(code):
    """End the process as a command: output flushed, then os._exit, without the interpreter's
    teardown (freeing every module and object one by one: ~6 ms, a tenth of a search as installed).
    Nothing is left to it: the index is closed by the command, worker processes are stopped, and
    Sesame registers no exit handlers. A failed write of the output is an error, as it would be."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass  # the reader left (`| head`): what it wanted was written
    except (OSError, ValueError) as e:
        _stderr("sesame: cannot write the output: %s" % (getattr(e, "strerror", None) or e))
        code = code or EXIT_ERROR
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


if __name__ == "__main__":
    leave(main())
