# Plexus py_calc worker driver (embedded in the plexus-node binary, run as `python -c`).
#
# Must run unchanged on CPython >= 3.9 and PyPy 3.9: no `match`, no `X | Y` annotations.
#
# Protocol: requests on the original stdin, replies on the original stdout. A reply is a 4-byte
# big-endian length and UTF-8 JSON. A request is three such lengths, then the three sections:
# a JSON header, the chunk's rows (JSON) and the texts of its data rows (UTF-8, see `_run`).
# Both descriptors are duplicated away at start and fd 0/1 are replaced (by /dev/null and
# stderr) so that user code that reads stdin or prints (even with os.write(1, ...)) cannot
# corrupt the protocol.
import builtins
import json
import os
import signal
import sys
import threading
import time
import traceback
import types

# The parent decides when a run stops: Ctrl-C reaches the whole process group, and a
# KeyboardInterrupt here would read as a failed row. The parent kills this process instead.
signal.signal(signal.SIGINT, signal.SIG_IGN)


def _watch_parent(parent):
    # No worker outlives its parent, even one killed with SIGKILL that could not kill us: once
    # we are re-parented, exit. Polling getppid() works for any parent thread layout, unlike
    # Linux's PR_SET_PDEATHSIG, which fires when the spawning *thread* ends (a pooled worker
    # outlives the executor thread that started it), and needs no ctypes. A formula looping in
    # Python still lets this thread run (the interpreter switches threads every few ms).
    while True:
        time.sleep(0.2)
        if os.getppid() != parent:
            os._exit(70)


_PARENT = os.getppid()
threading.Thread(target=_watch_parent, args=(_PARENT,), daemon=True).start()

_IN = os.fdopen(os.dup(0), "rb", 0)
_OUT = os.fdopen(os.dup(1), "wb", 0)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.dup2(2, 1)


class _Prints(object):
    # sys.stdout for user code: each printed line goes to stderr marked with the row being
    # computed (\x1e<row>\x1e<text>), and the parent logs it with its node and batch.
    def __init__(self):
        self._pending = ""

    def write(self, text):
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._emit(line)
        return len(text)

    def _emit(self, line):
        row = (_ROWS[-1][0] + 1) if _ROWS else 0
        mark = ("\x1e%d\x1e" % row) if _BUSY[0] else "\x1e-\x1e"
        sys.stderr.write(mark + line.replace("\x1e", " ") + "\n")

    def flush(self):
        if self._pending:
            line, self._pending = self._pending, ""
            self._emit(line)
        sys.stderr.flush()


sys.stdout = _Prints()

# Modules of loaded user code by content hash; a few nodes per pipeline, so a small cap.
_CACHE = {}
_CACHE_ORDER = []
_CACHE_CAP = 32
# Per-row outcomes of the chunk being executed, filled by the two helpers below.
_ROWS = []


def _read_exact(n):
    parts = []
    left = n
    while left > 0:
        part = _IN.read(left)
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _read_request():
    # (header, rows, texts), or None at the end of the input.
    head = _read_exact(12)
    if head is None:
        return None
    sections = []
    for at in (0, 4, 8):
        section = _read_exact(int.from_bytes(head[at:at + 4], "big"))
        if section is None:
            return None
        sections.append(section)
    header, rows, texts = sections
    return json.loads(header.decode("utf-8")), json.loads(rows.decode("utf-8")), texts


_SEND_LOCK = threading.Lock()


def _send(obj):
    body = json.dumps(obj).encode("utf-8")
    with _SEND_LOCK:
        _OUT.write(len(body).to_bytes(4, "big") + body)
        _OUT.flush()


def _clean(text):
    # Lone surrogates (from user strings) would make the reply undecodable on the Rust side.
    return text.encode("utf-8", "replace").decode("utf-8")


# Progress deadline: the watchdog below fails a chunk in which no row finished for this many
# seconds (the request's `deadline_s`; 0 = none), naming the line the main thread is on.
_DEADLINE = [0.0]
_LAST_PROGRESS = [0.0]
_BUSY = [False]
_MAIN = threading.get_ident()


def _progress():
    _LAST_PROGRESS[0] = time.monotonic()


def _watchdog():
    while True:
        time.sleep(0.1)
        deadline = _DEADLINE[0]
        if not _BUSY[0] or deadline <= 0:
            continue
        if time.monotonic() - _LAST_PROGRESS[0] <= deadline:
            continue
        line, function = 0, ""
        frame = sys._current_frames().get(_MAIN)
        while frame is not None:
            if frame.f_code.co_filename == _USER_CODE and line == 0:
                line, function = frame.f_lineno, frame.f_code.co_name
            frame = frame.f_back
        # The reply replaces the chunk's: the main thread never answers, we end the process.
        # Under the send lock, so a chunk finishing at this very moment cannot interleave.
        body = json.dumps({"status": "no_progress", "line": line, "function": _clean(function)})
        body = body.encode("utf-8")
        with _SEND_LOCK:
            if not _BUSY[0]:
                continue
            try:
                _OUT.write(len(body).to_bytes(4, "big") + body)
                _OUT.flush()
            finally:
                os._exit(71)


def _row_ok(idx, fields):
    # json.dumps with its defaults, as Capillaries prints it: NaN stays `NaN` and fails the row
    # when the Rust side decodes it; an unserialisable value raises here, inside the row's try.
    _ROWS.append([idx, json.dumps(fields)])
    _progress()


_USER_CODE = "<python_code>"


def _user_frames(tb):
    # The innermost frames of the user's formula code ([line, function], last 3, innermost
    # first), for the message naming the formula file and line.
    frames = [f for f in traceback.extract_tb(tb) if f.filename == _USER_CODE]
    return [[f.lineno or 0, _clean(f.name)] for f in reversed(frames[-3:])]


def _row_fail(idx, where):
    # `where` is 1 in the p-field function, 0 in the row's program; the traceback starts at the
    # frame that caught the exception, so its line is the failing statement there.
    tb = sys.exc_info()[2]
    lineno = tb.tb_lineno if tb is not None else 0
    last = ""
    for line in traceback.format_exc().split("\n"):
        if line.strip():
            last = line.strip()
    _ROWS.append([idx, where, lineno, _clean(last), _user_frames(tb)])
    _progress()


def _load_error():
    # The line in the user code: a SyntaxError's own line, else the innermost user frame.
    et, ev, tb = sys.exc_info()
    line = 0
    if isinstance(ev, SyntaxError) and ev.filename == _USER_CODE:
        line = ev.lineno or 0
    else:
        frames = _user_frames(tb)
        if frames:
            line = frames[0][0]
    lines = [l.strip() for l in _exception_only().split("\n") if l.strip()]
    return {"status": "load_error", "message": lines[-1] if lines else "", "line": line}


def _exception_only():
    et, ev = sys.exc_info()[:2]
    return _clean("".join(traceback.format_exception_only(et, ev)))


def _load(code):
    # A module's namespace rather than a plain dict: PyPy's JIT treats a module's globals as
    # nearly constant and a plain dict's as any dict (the formula ran 13 % slower there), and
    # it is what Capillaries' code sees as the main program (`python -`), hence `__main__`.
    module = types.ModuleType("__main__")
    ns = module.__dict__
    ns["__builtins__"] = builtins
    # The generated Capillaries program imports these before the user code runs.
    ns["json"] = json
    ns["traceback"] = traceback
    ns["__plexus_row_ok"] = _row_ok
    ns["__plexus_row_fail"] = _row_fail
    exec(compile(code, _USER_CODE, "exec"), ns)
    return module


def _run(req, rows, texts):
    # Each row is either a list of its reader values, where `[n]` stands for the next n bytes of
    # `texts`, or a program (a string) assigning the values as Capillaries' literals and calling
    # the p-field function, for values whose literals are not plain data. Every row's program
    # compiles before any row runs: a syntax error fails the chunk, as in Capillaries.
    key = req["hash"]
    module = _CACHE.get(key)
    if module is None:
        code = req.get("code")
        if code is None:
            return {"status": "need_code"}
        try:
            module = _load(code)
        except BaseException:
            return _load_error()
        _CACHE[key] = module
        _CACHE_ORDER.append(key)
        if len(_CACHE_ORDER) > _CACHE_CAP:
            _CACHE.pop(_CACHE_ORDER.pop(0), None)
    ns = module.__dict__
    calc_name = req["calc_name"]
    programs = {}
    try:
        if calc_name not in ns:
            exec(compile(req["calc"], "<py_calc fields>", "exec"), ns)
        for i, row in enumerate(rows):
            if row.__class__ is str:
                programs[i] = compile(row, "<py_calc>", "exec")
    except BaseException:
        return {"status": "syntax_error", "message": _exception_only()}
    calc = ns[calc_name]
    names = ["r_" + name for name in req["readers"]]
    view = memoryview(texts)
    at = 0
    del _ROWS[:]
    _DEADLINE[0] = float(req.get("deadline_s") or 0)
    _progress()
    _BUSY[0] = True
    try:
        for i, row in enumerate(rows):
            program = programs.get(i)
            if program is not None:
                exec(program, ns)
                continue
            for name, value in zip(names, row):
                if value.__class__ is list:
                    end = at + value[0]
                    value = str(view[at:end], "utf-8")
                    at = end
                ns[name] = value
            calc(i)
    except BaseException:
        # Every row sits in its own try/except, so only a broken helper can get here.
        return {"status": "exec_error", "message": _clean(traceback.format_exc())}
    finally:
        sys.stdout.flush()
        _BUSY[0] = False
    done = list(_ROWS)
    del _ROWS[:]
    return {"status": "ok", "rows": done}


def _main():
    threading.Thread(target=_watchdog, daemon=True).start()
    impl = sys.implementation.name
    version = ".".join(str(v) for v in sys.version_info[:3])
    _send({"status": "hello", "implementation": impl, "version": version})
    while True:
        request = _read_request()
        if request is None:
            return
        _send(_run(*request))
        sys.stderr.flush()


_main()
