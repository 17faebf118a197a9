"""The test harness that ``turnrl.verifiers.code.run_tests`` runs as ``main.py`` inside the sandbox.

turnrl never imports this module: its *source* is the program the sandbox runs (standard library only, Python ≥ 3.8).
Over 450 lines: the sandbox runs one self-contained file — the harness cannot import helpers of its own, and every
defence below must be in it before any untrusted code runs.
The threat model and every defence are in ``docs/REWARD_HACKING.md``. In short:

* **Input.** stdin holds a line with the run's secret token, then a JSON job: ``solution``, ``tests`` (a list of
  sources), ``script`` (one script or a list of asserts), ``entry_point``, ``trusted`` (task code whose definitions
  the tests use instead of the solution's, except the entry point) and ``budget`` (seconds). No file holds the
  tests or the token; the harness reads everything, then points stdin and stdout at ``/dev/null``.
* **Output.** One line ``TURNRL-VERDICT MAC {"results": [[ok, feedback], ...], "tampering": [...], "error": ...}``
  on the saved stdout, written last by the main thread with references captured before any untrusted code ran;
  MAC is HMAC-SHA256 of the JSON under the token, so reading the line does not help to forge one. A run that ends
  before writing it (``os._exit``, a crash, a kill) has no verdict, which the verifier scores 0.
* **Isolation.** The solution runs in a module of its own (``__solution__``, also ``sys.modules["__main__"]``) in
  a worker thread; the tests run in another worker thread, in a copy of that namespace with pristine builtins and
  the task's trusted definitions. Untrusted code never runs in the main thread, which holds the token.
* **Audit hook** (cannot be removed): code under test never gets a frame object (``sys._getframe`` except for
  namedtuple/Enum/typing's module lookups, ``tb_frame``, ``gi_frame``…), nor ``sys._current_frames``, ``gc``'s object
  walks, ctypes, tracing/profiling hooks, other audit hooks, new processes, files under ``/proc``, or changes to the
  special attributes (``__bases__``, ``__name__``…) of classes that existed before it ran. Each refusal is recorded as tampering.
* **Values.** Calls to the solution's functions named in the tests return plain values (numbers, strings, bytes,
  None, lists, tuples, dicts, sets; subclasses that override no behaviour); iterators are checked item by item; the
  operands of every ``assert`` comparison are checked the same way. Overriding behaviour counts as tampering.
* **Monkeypatching.** Module attributes (functions, classes, submodules) of every module loaded before the solution
  ran, their classes' attributes, ``sys.modules`` and the builtins are compared by identity at the end (those the
  tests import, and the builtins, after every test).
"""

import builtins as _B

globals().update({k: v for k, v in vars(_B).items() if not k.startswith("__")})  # lookups never reach _B again

import _json
import _sha256  # not _hashlib: loading OpenSSL costs milliseconds
import _thread
import ast
import collections
import enum
import itertools
import json
import os
import sys
import time
import types
import typing

TEST_LINE = 1_000_000  # test code is compiled from this line on, the solution from SOLUTION_LINE (frame-free feedback)
SOLUTION_LINE = 2_000_000
PLAIN, VALUE = "__turnrl_plain__", "__turnrl_value__"
NUMERIC_BUILTINS = frozenset({"abs", "round", "float", "int", "complex", "divmod", "pow", "sum", "min", "max", "bool"})
MAX_FEEDBACK = 600
MAX_NODES = 1_000_000
MAX_EVENTS = 20
SAFE_DUNDERS = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__slots__",
        "__init__",
        "__new__",
        "__annotations__",
        "__orig_bases__",
        "__parameters__",
        "__match_args__",
        "__firstlineno__",
        "__static_attributes__",
        "__init_subclass__",
        "__class_getitem__",
        "__getnewargs__",
    }
)
BEHAVIOUR_DUNDERS = frozenset(
    f"__{n}__"
    for n in [
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "hash",
        "bool",
        "len",
        "contains",
        "iter",
        "next",
        "getitem",
        "reversed",
        "missing",
        "abs",
        "neg",
        "pos",
        "invert",
        "add",
        "radd",
        "sub",
        "rsub",
        "mul",
        "rmul",
        "truediv",
        "rtruediv",
        "floordiv",
        "rfloordiv",
        "mod",
        "rmod",
        "divmod",
        "rdivmod",
        "pow",
        "rpow",
        "float",
        "int",
        "index",
        "complex",
        "round",
        "trunc",
        "floor",
        "ceil",
        "getattribute",
        "getattr",
        "class",
        "instancecheck",
        "subclasscheck",
        "and",
        "rand",
        "or",
        "ror",
        "xor",
        "rxor",
    ]
)
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_code"})
ALWAYS_REFUSED = frozenset(
    {
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
        "sys._settraceallthreads",
        "sys._setprofileallthreads",
        "sys.addaudithook",
        "sys.monitoring.register_callback",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
        "os.startfile",
    }
)
PROC_PATHS = ("/proc/", "/dev/fd/", "/dev/stdin", "/dev/stdout", "/dev/stderr")
REFUSED_IMPORTS = frozenset({"ctypes", "_ctypes", "_testcapi", "_testinternalcapi", "_xxsubinterpreters"})


# No class of the harness has Python methods: code under test can reach any class (``TypeError.__subclasses__()``),
# and a method's ``__globals__`` would be the harness's own namespace.
NotPlainValue = type(
    "NotPlainValue", (TypeError,), {"__module__": "turnrl", "__doc__": "A value under test is not plain."}
)


def _write_all(fd, data, write=os.write):
    while data:
        data = data[write(fd, data) :]


def _read_all(fd, read=os.read):
    chunks = []
    while True:
        chunk = read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _cap(text, n=MAX_FEEDBACK):
    return text if len(text) <= n else text[: n - 3] + "..."


# ---- plain values ----


def _make_checker(tampering):
    """``plain(value, what)``: the value if it is plain, else raise NotPlainValue (and record tampering)."""
    leaves = [int, float, complex, bool, str, bytes, bytearray, type(None), range, type(Ellipsis)]
    containers = {
        id(list): list.__iter__,
        id(tuple): tuple.__iter__,
        id(set): set.__iter__,
        id(frozenset): frozenset.__iter__,
        id(collections.deque): collections.deque.__iter__,
    }
    leaf_ids = frozenset(id(t) for t in leaves)
    type_id, dict_id = id(type), id(dict)
    nt_repr = collections.namedtuple("_T", "a").__repr__.__code__
    function_type = types.FunctionType
    type_name = type.__dict__["__name__"].__get__
    mro_of = type.__dict__["__mro__"].__get__
    dict_of = type.__dict__["__dict__"].__get__
    iter_ids = frozenset(
        id(t)
        for t in (
            types.GeneratorType,
            map,
            filter,
            zip,
            enumerate,
            reversed,
            type(iter([])),
            type(iter(())),
            type(iter(range(0))),
            type(iter("")),
            type(iter({})),
            type(iter({}.values())),
            type(iter({}.items())),
            type(iter(set())),
            *[t for t in vars(itertools).values() if isinstance(t, type)],
        )
    )
    view_ids = frozenset(id(type(v)) for v in ({}.keys(), {}.values(), {}.items()))

    def kind(t):
        """'leaf', an iterator over a container's items, 'dict', or an error message (and whether it tampers)."""
        tid = id(t)
        if tid in leaf_ids:
            return "leaf", None
        if tid in containers or tid == dict_id or tid in view_ids:
            return "container", None
        if id(type(t)) != type_id:
            return None, (f"an object of type {type_name(type(t))}-created class {type_name(t)}", True)
        for cls in mro_of(t):
            cid = id(cls)
            if cid in leaf_ids or cid in containers or cid == dict_id:
                return ("leaf" if cid in leaf_ids else "container"), cls
            if cls is object:
                break
            if cid in trusted_ids:
                continue
            attrs = dict_of(cls)
            for key in attrs:
                if type(key) is not str:
                    return None, (f"an object of type {type_name(t)} (odd class attributes)", True)
                if key in SAFE_DUNDERS or not (key.startswith("__") and key.endswith("__")):
                    continue
                f = attrs[key]
                if key == "__repr__" and type(f) is function_type and f.__code__ is nt_repr:
                    continue  # a namedtuple's
                return None, (f"an object of type {type_name(t)}, which defines {key}", key in BEHAVIOUR_DUNDERS)
        return None, (f"an object of type {type_name(t)}", False)

    trusted_ids = set()

    def plain(value, what="a value"):
        stack, seen, n = [value], set(), 0
        while stack:
            v = stack.pop()
            n += 1
            if n > MAX_NODES:
                raise NotPlainValue(f"{what} is too large to check (over {MAX_NODES} parts)")
            t = type(v)
            if id(t) in leaf_ids or (id(t) == type_id and id(v) in trusted_ids):  # ints... and `type(x) is int`
                continue
            k, base = kind(t)
            if k is None:
                message, tampered = base
                if tampered:
                    tampering.append(f"non-plain value: {message}")
                raise NotPlainValue(
                    f"{what} is {message}; return plain values (numbers, strings, lists, tuples, dicts, sets, None)"
                )
            if k == "leaf" or id(v) in seen:
                continue
            seen.add(id(v))
            if id(t) in view_ids:
                stack.extend(iter(v))
            elif id(t) == dict_id or (base is not None and id(base) == dict_id):
                for key, item in dict.items(v):
                    stack.append(key)
                    stack.append(item)
            else:
                stack.extend(containers[id(base if base is not None else t)](v))
        return value

    def checked_iter(it, what):
        for item in it:
            yield plain(item, f"an item of {what}")

    def value(v, what="a value computed in an assert"):
        return checked_iter(v, what) if id(type(v)) in iter_ids else plain(v, what)

    def checked(fn, name):
        what = f"{name}()"

        def call(*args, **kwargs):
            return value(fn(*args, **kwargs), what)

        return call

    return plain, value, checked, trusted_ids


# ---- feedback without frames ----


def _make_describe(solution_lines):
    tb_of = BaseException.__dict__["__traceback__"].__get__
    type_name = type.__dict__["__name__"].__get__
    traceback_type = types.TracebackType

    def describe(e, test_lines=(), full=True):
        """``Kind: message`` plus, when ``full``, the test and solution lines the error passed through."""
        name = type_name(type(e))
        try:
            message = str(e)
            message = message if type(message) is str else ""
        except BaseException:  # an exception that cannot be printed still fails the test
            message = "<unprintable>"
        where = []
        tb = tb_of(e)
        while type(tb) is traceback_type and len(where) < 40:
            line = tb.tb_lineno
            if type(line) is int and line >= SOLUTION_LINE and line - SOLUTION_LINE <= len(solution_lines):
                where.append(
                    f"  your code, line {line - SOLUTION_LINE}: {solution_lines[line - SOLUTION_LINE - 1].strip()}"
                )
            elif type(line) is int and TEST_LINE <= line < SOLUTION_LINE and line - TEST_LINE <= len(test_lines):
                where.append(f"  test, line {line - TEST_LINE}: {test_lines[line - TEST_LINE - 1].strip()}")
            tb = tb.tb_next
        if not full:
            where = [w for w in where if w.startswith("  your code")][-1:]
        head = f"{name}: {_cap(message, 300)}" if message else name
        return _cap("\n".join([*where[-8:], head]) if where else head)

    return describe


# ---- the audit hook ----


def _make_hook(tampering, counts):
    get_ident, getframe, stat = _thread.get_ident, sys._getframe, os.stat
    busy = set()
    allowed_callers = frozenset(
        id(c)
        for c in (
            collections.namedtuple.__code__,
            getattr(getattr(enum.EnumMeta, "_create_", None), "__code__", None),
            getattr(getattr(typing, "_caller", None), "__code__", None),
        )
        if c is not None
    )
    try:
        proc_dev = stat("/proc").st_dev
    except OSError:
        proc_dev = None
    trusted_class_ids = set()

    def refuse(event, detail=""):
        counts[0] += 1
        entry = f"{event}{detail}"
        if len(tampering) < MAX_EVENTS and entry not in tampering:
            tampering.append(entry)
        raise RuntimeError(f"{event} is not allowed in code under test (turnrl verifier)")

    def hook(event, args):
        if event in ALWAYS_REFUSED or event.startswith("ctypes."):
            refuse(event)
        if event == "sys._getframe":
            ident = get_ident()
            if ident in busy:
                return
            busy.add(ident)
            try:
                caller = getframe(1).f_code
            finally:
                busy.discard(ident)
            if id(caller) not in allowed_callers:
                refuse(event)
        elif event == "object.__getattr__":
            if args[1] in FRAME_ATTRS and get_ident() not in busy:
                refuse(event, f" ({args[1]})")
        elif event in ("object.__setattr__", "object.__delattr__"):
            if id(args[0]) in trusted_class_ids:
                refuse(event, f" ({args[1]})")
        elif event == "open":
            path = args[0]
            if type(path) is str and path.startswith(PROC_PATHS):  # magic links: /proc/self/fd/N stats as its file
                refuse(event, " (/proc)")
            if proc_dev is not None and type(path) in (str, bytes):
                try:
                    dev = stat(path).st_dev
                except (OSError, ValueError):
                    return
                if dev == proc_dev:
                    refuse(event, " (/proc)")
        elif event == "import":
            if args[0] in REFUSED_IMPORTS:
                refuse(event, f" ({args[0]})")

    return hook, trusted_class_ids


# ---- monkeypatching ----


def _snapshot(modules):
    """What code under test must not rebind: the functions, classes and submodules of every loaded module, and the
    attributes of their (mutable) classes, as (label, module or None, mapping, [(key, value)])."""
    module_type, snap, seen = types.ModuleType, [], set()
    class_dict, immutable = type.__dict__["__dict__"].__get__, 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
    for name, mod in list(modules.items()):
        if type(mod) is not module_type or name == "__main__":
            continue
        d = mod.__dict__
        keep = [(k, v) for k, v in d.items() if type(k) is str and (callable(v) or type(v) is module_type)]
        if name == "sys":
            keep.append(("modules", modules))
        snap.append((name, mod, d, keep))
        for k, cls in keep:
            if type(cls) is type and not cls.__flags__ & immutable and id(cls) not in seen:
                seen.add(id(cls))
                attrs = class_dict(cls)
                snap.append((f"{name}.{k}", None, attrs, list(attrs.items())))
    return snap


def _changed(snap, modules):
    """``module.attr`` names whose value is no longer the one in ``snap`` (or modules no longer loaded)."""
    out = []
    for label, mod, d, keep in snap:
        if mod is not None and modules.get(label) is not mod:
            out.append(f"sys.modules[{label!r}]")
            continue
        for k, v in keep:
            if d.get(k) is not v:
                out.append(f"{label}.{k}")
    return out


# ---- compiling ----


def _plainify(tree):
    """Rewrite every ``assert`` of the tests so that the values whose special methods decide it are checked.

    Comparison operands and the tested value must be plain (``__turnrl_plain__``); so must the operands of
    arithmetic (``abs(f(x) - y) < eps``) and the arguments of numeric builtins (``abs``, ``round``, ``sum``...)
    (``__turnrl_value__``: iterators are checked item by item). Other values (``isinstance(S(), S)``,
    ``len(stack)``, ``Solution().f(x)``) are left alone: forging them would need the expected answer.
    """

    def call(name, e):
        return ast.copy_location(ast.Call(ast.Name(name, ast.Load()), [e], []), e)

    def guard(node, check):
        if isinstance(node, ast.BinOp):
            node.left, node.right = guard(node.left, True), guard(node.right, True)
        elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            node.operand = guard(node.operand, True)
        elif isinstance(node, ast.Call):
            numeric = isinstance(node.func, ast.Name) and node.func.id in NUMERIC_BUILTINS
            node.func = guard(node.func, False)
            node.args = [guard(a, numeric) for a in node.args]
            for kw in node.keywords:
                kw.value = guard(kw.value, numeric)
        else:
            for field, value in ast.iter_fields(node):
                if isinstance(value, list):
                    setattr(node, field, [guard(v, False) if isinstance(v, ast.AST) else v for v in value])
                elif isinstance(value, ast.AST):
                    setattr(node, field, guard(value, False))
        checkable = isinstance(node, ast.expr) and not isinstance(node, (ast.Constant, ast.Starred, ast.Lambda))
        return call(VALUE, node) if check and checkable else node

    def operands(e):
        if isinstance(e, ast.Compare):
            e.left, e.comparators = call(PLAIN, e.left), [call(PLAIN, c) for c in e.comparators]
        elif isinstance(e, ast.BoolOp):
            e.values = [operands(v) for v in e.values]
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            e.operand = operands(e.operand)
        else:
            return call(PLAIN, e)
        return e

    for node in list(ast.walk(tree)):
        if isinstance(node, ast.Assert):
            node.test = operands(guard(node.test, False))
    return tree


def _compile_test(source):
    """(code, names it reads but never binds, modules it imports) — or (None, the error, ()) if it does not compile."""
    try:
        tree = _plainify(ast.parse(source, "<tests>"))
        nodes = list(ast.walk(tree))
        bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        bound |= {
            (a.asname or a.name).split(".")[0]
            for n in nodes
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        }
        names = {n.id for n in nodes if isinstance(n, ast.Name)} - bound
        imports = [a.name for n in nodes if isinstance(n, ast.Import) for a in n.names]
        imports += [n.module for n in nodes if isinstance(n, ast.ImportFrom) and n.module and not n.level]
        tree = ast.increment_lineno(ast.fix_missing_locations(tree), TEST_LINE)
        return compile(tree, "<tests>", "exec", dont_inherit=True, optimize=0), names, imports
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return None, f"the test does not compile: {type(e).__name__}: {e}", ()


def _compile_solution(source):
    """The solution's code object, or a ``SyntaxError: …`` feedback string."""
    try:
        tree = ast.increment_lineno(ast.parse(source, "<solution>"), SOLUTION_LINE)
        return compile(tree, "<solution>", "exec", dont_inherit=True, optimize=0)
    except SyntaxError as e:
        line = f" (line {e.lineno})" if e.lineno else ""
        text = f"\n    {e.text.strip()}" if isinstance(e.text, str) and e.text.strip() else ""
        return f"{type(e).__name__}: {e.msg}{line}{text}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return f"your code could not be compiled: {type(e).__name__}: {_cap(str(e), 200)}"


# ---- running ----


def _run(job, tampering):
    """Results, tampering and an error for ``job`` (see the module docstring)."""
    monotonic, start_thread = time.monotonic, _thread.start_new_thread  # a solution may rebind the module attributes
    start, budget = monotonic(), float(job["budget"])
    deadline = start + budget
    tests = [_compile_test(t) for t in job["tests"]]
    test_lines = [t.splitlines() for t in job["tests"]]
    entry = job.get("entry_point")
    for _, _, imports in tests:
        for mod in imports:
            try:
                __import__(mod)
            except BaseException:  # the test itself will report it
                continue
    trusted_defs = {}
    if job.get("trusted"):
        trusted_ns = {"__builtins__": _B, "__name__": "__task__"}
        exec(compile(job["trusted"], "<task>", "exec", dont_inherit=True), trusted_ns)  # task data
        trusted_defs = {k: v for k, v in trusted_ns.items() if k != entry and not k.startswith("__")}
    code = _compile_solution(job["solution"])
    if type(code) is str:
        return [[False, code]] * len(tests), None

    counts = [0]
    plain, value, checked, trusted_ids = _make_checker(tampering)
    describe = _make_describe(job["solution"].splitlines())
    modules = sys.modules
    snap = _snapshot(modules)
    watched = ("builtins", "sys", *[m for _, _, ims in tests for m in ims])
    quick = [s for s in snap if s[0].partition(".")[0] in watched]
    hook, trusted_class_ids = _make_hook(tampering, counts)
    for _, mod, _, keep in snap:
        for _, v in keep if mod is not None else ():
            if isinstance(v, type):
                trusted_class_ids.add(id(v))
                trusted_ids.add(id(v))
    trusted_class_ids.add(id(NotPlainValue))
    pristine = dict(vars(_B))
    module = types.ModuleType("__solution__")
    ns = module.__dict__
    ns["__builtins__"] = _B
    modules["__solution__"] = modules["__main__"] = module
    snap.append(("__solution__", module, ns, []))
    referenced = set().union(*[names for c, names, _ in tests if c is not None]) | ({entry} if entry else set())

    defined, tested = [], []
    define_done, test_done = _thread.allocate_lock(), _thread.allocate_lock()
    define_done.acquire()
    test_done.acquire()

    def define():
        try:
            exec(code, ns)  # in the sandbox, under the audit hook
        except BaseException as e:
            defined.append(describe(e))
        else:
            defined.append(None)
        finally:
            define_done.release()

    def build():
        tg = {k: v for k, v in list(ns.items()) if type(k) is str}
        tg.update(trusted_defs)
        tg.update(__builtins__=dict(pristine), __name__="__main__")
        for name in referenced:  # the entry point even if it is a class; other names if they are functions
            v = tg.get(name)
            if name not in trusted_defs and callable(v) and (name == entry or not issubclass(type(v), type)):
                tg[name] = checked(v, name)
        tg[PLAIN], tg[VALUE] = plain, value
        return tg, [(k, tg[k]) for k in (*referenced, PLAIN, VALUE) if k in tg], tg["__builtins__"]

    def run_all():
        try:
            tg, harness_entries, tg_builtins = build()
            for i, (c, err, _) in enumerate(tests):
                if c is None:
                    tested.append((False, err))
                    continue
                try:
                    exec(c, tg)
                except BaseException as e:  # any way out of a test but its end is a failure
                    result = (False, describe(e, test_lines[i], full=job["script"]))
                else:
                    result = (True, "")
                moved = [f"tests' {k}" for k, v in harness_entries if tg.get(k) is not v]
                moved += [f"tests' builtins.{k}" for k, v in pristine.items() if tg_builtins.get(k) is not v]
                for where in moved + _changed(quick, modules):
                    if len(tampering) < MAX_EVENTS and f"monkeypatched {where}" not in tampering:
                        tampering.append(f"monkeypatched {where}")
                tested.append(result)
        except BaseException as e:
            tested.append((False, "the tests could not run: " + describe(e, full=False)))
        finally:
            test_done.release()

    sys.addaudithook(hook)
    _thread.stack_size(32 * 1024 * 1024)
    start_thread(define, ())
    if not define_done.acquire(True, max(deadline - monotonic(), 0.01)):
        return [[False, f"wall-clock timeout: your code was still running after {budget:.3g} s"]] * len(tests), None
    if defined[0] is not None:
        return [[False, defined[0]]] * len(tests), None
    start_thread(run_all, ())
    finished = test_done.acquire(True, max(deadline - monotonic(), 0.01))
    results = [[ok, feedback] for ok, feedback in list(tested)]
    if not finished:
        results.append([False, f"wall-clock timeout: the test was still running after {budget:.3g} s in all"])
    results += [[False, "not run (an earlier test timed out)"]] * (len(tests) - len(results))
    for where in _changed(snap, modules):
        if len(tampering) < MAX_EVENTS and f"monkeypatched {where}" not in tampering:
            tampering.append(f"monkeypatched {where}")
    if counts[0] > len(tampering):
        tampering.append(f"{counts[0]} refused operations in all")
    return results[: len(tests)], None


def _encode(results, tampering, error, esc=_json.encode_basestring_ascii):
    """The verdict as JSON, built without the json module (which code under test may have patched)."""
    rows = ",".join(f"[{'true' if ok is True else 'false'},{esc(fb if type(fb) is str else '')}]" for ok, fb in results)
    events = ",".join(esc(t) for t in list(tampering)[: MAX_EVENTS + 1] if type(t) is str)
    return f'{{"results":[{rows}],"tampering":[{events}],"error":{esc(error) if error else "null"}}}'


def _hmac_sha256(key, message, sha256=_sha256.sha256):
    """HMAC-SHA256 (RFC 2104) from the C hash alone (the hmac module is Python code that a solution could patch)."""
    key = (sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
    inner = sha256(bytes(k ^ 0x36 for k in key) + message).digest()
    return sha256(bytes(k ^ 0x5C for k in key) + inner).hexdigest()


def _main(hmac=_hmac_sha256, exit=os._exit):
    raw = _read_all(0)
    token, _, body = raw.partition(b"\n")
    out, null = os.dup(1), os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    tampering = []
    try:
        job = json.loads(body)
        results, error = _run(job, tampering)
    except BaseException as e:  # a harness failure is reported, never a pass
        results, error = [], f"harness: {type(e).__name__}: {_cap(str(e), 300)}"
    body = _encode(results, tampering, error).encode("ascii")
    _write_all(out, b"TURNRL-VERDICT " + hmac(token, body).encode("ascii") + b" " + body + b"\n")
    exit(0)


if __name__ == "__main__":
    _main()
