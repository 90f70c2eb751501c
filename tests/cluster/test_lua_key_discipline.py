"""Static proof that every key a store script touches lies under the store's hash tag.

A store maps to one Redis Cluster slot only if each key its scripts access starts with
``KEYS[1]`` (the tag ``"{<prefix>}"``, the only key a call passes).  This module parses
the Lua that Redis actually runs -- for each operation the helpers of ``store/lua/lib``
plus ``begin_call(KEYS[1])`` plus the operation's file, exactly ``store.scripts.script_text``;
and the Redis Function library of ``store.scripts.library`` -- and follows every key
argument of every ``redis.call``/``redis.pcall`` back to where its value comes from:

* a value is *tagged* when it is ``KEYS[1]`` itself, or a concatenation whose first
  operand is tagged (a string that starts with ``"{p}"`` hashes to the slot of ``p``);
* a local or global variable is tagged when every value ever assigned to it is;
  a function parameter when the matching argument of every call site is (a function
  whose callers cannot be seen -- passed around, stored in a table -- taints its
  parameters); a call's result when every ``return`` of the called local function is;
  a table element or field when every constructor item and every store into every
  table the expression may denote is; a ``for ... in ipairs/pairs(t)`` variable when
  the elements (or keys) of ``t`` are;
* anything else is not: ``ARGV`` items, string literals, numbers, replies of other
  Redis commands, results of built-in functions.

So ``B``, the ``K_*`` constants and the ``k_*`` builders of ``lib/keys.lua`` are not
trusted by name: they pass because their values derive from ``bind(tag)`` <-
``begin_call(KEYS[1])``.  Also refused anywhere: ``KEYS`` other than ``KEYS[1]``,
``redis.call`` used as a value (an alias would escape the check), a command name that
is not a literal, a command whose key positions this module does not know (add it to
``KEY_ARGS`` after checking its key spec), and dynamic code (``loadstring``, ``_G``...).

The one reviewed exception is ``ALLOWED_UNTAGGED``: the ``list`` operation receives its
source sorted-set names in ARGV.  Those names are built by ``store.listing.plan_list_query``
from ``StoreKeys``; ``test_list_sources_are_always_store_keys`` pins that down, and the
cluster conformance run exercises every list route against a real cluster.

``test_the_check_catches_*`` feed deliberately broken Lua (a literal key, an ARGV key,
a key through a parameter, a helper reading a key from a hash, ``KEYS[2]``, a builder
that drops the tag...) through the same check and expect each to be reported, so the
check is shown to bite, not just to pass.
"""

from __future__ import annotations

import functools
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import pytest

from store import scripts as store_scripts
from store.keys import StoreKeys
from store.listing import ORDER_FIELDS, plan_list_query
from store.records import ALL_STATES

#: A whole-directory check walks every operation (~12 s on a quiet 2-core machine; more
#: when the suite's workers share the cores): a longer hang guard than the suite's 120 s.
pytestmark = pytest.mark.timeout(480)

LUA_DIR = store_scripts.LUA_DIR
#: Captured at import: the cluster guard swaps ``script_text`` during tests.
SHIPPED_SCRIPT_TEXT = store_scripts.script_text

# ---------------------------------------------------------------- key positions

#: Command -> which arguments (after the command name) are keys: an int n = the n-th,
#: "all" = every argument.  PUBLISH's channel is held to the same rule (sharded pub/sub
#: routes channels by slot too).  A command missing here is reported, never guessed.
KEY_ARGS: dict[str, int | str] = {
    **dict.fromkeys(
        """GET SET SETNX GETSET INCR INCRBY INCRBYFLOAT DECR DECRBY STRLEN APPEND
        EXPIRE PEXPIRE PEXPIREAT EXPIREAT PERSIST TTL PTTL TYPE
        HGET HSET HSETNX HMGET HMSET HGETALL HDEL HINCRBY HINCRBYFLOAT HEXISTS HLEN HKEYS HVALS
        ZADD ZREM ZSCORE ZMSCORE ZINCRBY ZCARD ZCOUNT ZLEXCOUNT ZRANK ZREVRANK ZRANGE ZREVRANGE
        ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREMRANGEBYLEX
        ZREMRANGEBYSCORE ZREMRANGEBYRANK ZPOPMIN ZPOPMAX
        SADD SREM SISMEMBER SMISMEMBER SMEMBERS SCARD SRANDMEMBER SPOP
        LPUSH RPUSH LPOP RPOP LLEN LRANGE LINDEX LREM LTRIM LSET
        XADD XTRIM PUBLISH""".split(),  # noqa: SIM905
        1,
    ),
    **dict.fromkeys(["DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "RENAME"], "all"),
}

#: (operation, source line) pairs whose key values may come from ARGV, with the reason.
ALLOWED_UNTAGGED = {
    ("list", "for i = 1, n do sources[i] = ARGV[10 + i] end"): (
        "list's source zsets arrive in ARGV, built by plan_list_query from StoreKeys "
        "(see test_list_sources_are_always_store_keys)"
    ),
}

#: Literal kinds standing for values the walk could not follow.
UNKNOWN_VALUE, UNKNOWN_KEY, RESULT = (
    "value of an unknown table",
    "key of an unknown table",
    "call result",
)
OPAQUE = {UNKNOWN_VALUE, UNKNOWN_KEY, RESULT}

FORBIDDEN_GLOBALS = {"loadstring", "load", "dofile", "loadfile", "setfenv", "getfenv", "_G"}

# ---------------------------------------------------------------- lexer

KEYWORDS = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
}  # fmt: skip
SYMBOLS = sorted(
    "... .. == ~= <= >= + - * / % ^ # < > = ( ) { } [ ] ; : , .".split(),  # noqa: SIM905
    key=len,
    reverse=True,
)


@dataclass
class Tok:
    kind: str  # name, keyword, number, string, op, eof
    value: str
    line: int


class LuaSyntaxError(Exception):
    pass


_TOKEN = re.compile(
    r"""(?P<newline>\n)|(?P<space>[ \t\r]+)
    |(?P<longcomment>--\[(?P<ceq>=*)\[[\s\S]*?\](?P=ceq)\])|(?P<comment>--[^\n]*)
    |(?P<longstring>\[(?P<seq>=*)\[(?P<body>[\s\S]*?)\](?P=seq)\])
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<string>'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")
    |(?P<op>"""
    + "|".join(re.escape(sym) for sym in SYMBOLS)
    + ")",
    re.VERBOSE,
)


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i, line, n = 0, 1, len(src)
    while i < n:
        m = _TOKEN.match(src, i)
        if m is None:
            raise LuaSyntaxError(f"line {line}: unexpected character {src[i]!r}")
        kind, text = m.lastgroup, m.group(0)
        if kind in ("ceq", "seq", "body"):  # a nested group named last: find the outer one
            kind = "longcomment" if m.group("longcomment") else "longstring"
        if kind == "name":
            toks.append(Tok("keyword" if text in KEYWORDS else "name", text, line))
        elif kind == "number":
            toks.append(Tok("number", text, line))
        elif kind == "string":
            toks.append(Tok("string", _unescape(text[1:-1]), line))
        elif kind == "longstring":
            toks.append(Tok("string", m.group("body").removeprefix("\n"), line))
        elif kind == "op":
            toks.append(Tok("op", text, line))
        line += text.count("\n")
        i = m.end()
    toks.append(Tok("eof", "", line))
    return toks


def _unescape(text: str) -> str:
    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
    return re.sub(r"\\(.)", lambda m: simple.get(m.group(1), m.group(1)), text)


# ---------------------------------------------------------------- AST


@dataclass(eq=False)
class Node:
    line: int


@dataclass(eq=False)
class Literal(Node):
    kind: str  # string number nil true false vararg
    value: str = ""


@dataclass(eq=False)
class Name(Node):
    name: str
    env: Any = None  # the scope at this use, set by the analyzer


@dataclass(eq=False)
class Index(Node):
    obj: Node
    key: Node  # a string Literal for ``obj.field``


@dataclass(eq=False)
class Call(Node):
    func: Node
    args: list[Node]
    method: str | None = None


@dataclass(eq=False)
class Function(Node):
    params: list[str]
    body: list[Node]
    returns: list[Any] = field(default_factory=list)  # Return nodes of this function only
    bound: list[Any] = field(default_factory=list)  # Bindings holding it
    escapes: bool = False  # used other than as a bound, directly called function
    register_callback: bool = False  # the callback of redis.register_function


@dataclass(eq=False)
class Table(Node):
    items: list[tuple[Node | None, Node]]  # (key or None for positional, value)


@dataclass(eq=False)
class BinOp(Node):
    op: str
    left: Node
    right: Node


@dataclass(eq=False)
class UnOp(Node):
    op: str
    operand: Node


@dataclass(eq=False)
class Paren(Node):
    inner: Node


@dataclass(eq=False)
class Local(Node):
    names: list[str]
    exprs: list[Node]


@dataclass(eq=False)
class LocalFunction(Node):
    name: str
    func: Function


@dataclass(eq=False)
class Assign(Node):
    targets: list[Node]
    exprs: list[Node]


@dataclass(eq=False)
class CallStat(Node):
    call: Call


@dataclass(eq=False)
class Do(Node):
    body: list[Node]


@dataclass(eq=False)
class While(Node):
    cond: Node
    body: list[Node]


@dataclass(eq=False)
class Repeat(Node):
    body: list[Node]
    cond: Node


@dataclass(eq=False)
class If(Node):
    conds: list[Node]
    blocks: list[list[Node]]
    orelse: list[Node] | None


@dataclass(eq=False)
class NumFor(Node):
    var: str
    start: Node
    stop: Node
    step: Node | None
    body: list[Node]


@dataclass(eq=False)
class GenFor(Node):
    names: list[str]
    exprs: list[Node]
    body: list[Node]


@dataclass(eq=False)
class FunctionStat(Node):
    target: Node  # Name or Index
    func: Function


@dataclass(eq=False)
class Return(Node):
    exprs: list[Node]


@dataclass(eq=False)
class Break(Node):
    pass


# ---------------------------------------------------------------- parser (Lua 5.1)

BINARY = {
    "or": (1, 1), "and": (2, 2),
    "<": (3, 3), ">": (3, 3), "<=": (3, 3), ">=": (3, 3), "~=": (3, 3), "==": (3, 3),
    "..": (5, 4),  # right associative
    "+": (6, 6), "-": (6, 6), "*": (7, 7), "/": (7, 7), "%": (7, 7),
    "^": (10, 9),  # right associative
}  # fmt: skip
UNARY_PRIORITY = 8


class Parser:
    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.pos = 0
        self.functions: list[Function] = []  # innermost last, while parsing

    # -- token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.pos]

    def check(self, value: str) -> bool:
        t = self.tok
        return t.kind in ("op", "keyword") and t.value == value

    def accept(self, value: str) -> bool:
        if self.check(value):
            self.pos += 1
            return True
        return False

    def expect(self, value: str) -> Tok:
        if not self.check(value):
            raise LuaSyntaxError(
                f"line {self.tok.line}: expected {value!r}, got {self.tok.value!r}"
            )
        t = self.tok
        self.pos += 1
        return t

    def name(self) -> str:
        t = self.tok
        if t.kind != "name":
            raise LuaSyntaxError(f"line {t.line}: expected a name, got {t.value!r}")
        self.pos += 1
        return t.value

    # -- blocks and statements
    def chunk(self) -> list[Node]:
        main = Function(1, ["..."], [])
        self.functions.append(main)
        body = self.block()
        if self.tok.kind != "eof":
            raise LuaSyntaxError(f"line {self.tok.line}: unexpected {self.tok.value!r}")
        main.body = body
        return body

    def block(self) -> list[Node]:
        stats: list[Node] = []
        while not (
            self.tok.kind == "eof"
            or (self.tok.kind == "keyword" and self.tok.value in ("end", "else", "elseif", "until"))
        ):
            if self.check("return"):
                line = self.tok.line
                self.pos += 1
                exprs: list[Node] = []
                if not (
                    self.tok.kind == "eof"
                    or self.check(";")
                    or (
                        self.tok.kind == "keyword"
                        and self.tok.value in ("end", "else", "elseif", "until")
                    )
                ):
                    exprs = self.exprlist()
                ret = Return(line, exprs)
                self.functions[-1].returns.append(ret)
                stats.append(ret)
                self.accept(";")
                break
            stat = self.statement()
            if stat is not None:
                stats.append(stat)
        return stats

    def statement(self) -> Node | None:
        t = self.tok
        line = t.line
        if self.accept(";"):
            return None
        if self.accept("break"):
            return Break(line)
        if self.accept("do"):
            body = self.block()
            self.expect("end")
            return Do(line, body)
        if self.accept("while"):
            cond = self.expr()
            self.expect("do")
            body = self.block()
            self.expect("end")
            return While(line, cond, body)
        if self.accept("repeat"):
            body = self.block()
            self.expect("until")
            return Repeat(line, body, self.expr())
        if self.accept("if"):
            conds, blocks, orelse = [self.expr()], [], None
            self.expect("then")
            blocks.append(self.block())
            while self.accept("elseif"):
                conds.append(self.expr())
                self.expect("then")
                blocks.append(self.block())
            if self.accept("else"):
                orelse = self.block()
            self.expect("end")
            return If(line, conds, blocks, orelse)
        if self.accept("for"):
            first = self.name()
            if self.accept("="):
                start = self.expr()
                self.expect(",")
                stop = self.expr()
                step = self.expr() if self.accept(",") else None
                self.expect("do")
                body = self.block()
                self.expect("end")
                return NumFor(line, first, start, stop, step, body)
            names = [first]
            while self.accept(","):
                names.append(self.name())
            self.expect("in")
            exprs = self.exprlist()
            self.expect("do")
            body = self.block()
            self.expect("end")
            return GenFor(line, names, exprs, body)
        if self.accept("function"):
            target: Node = Name(line, self.name())
            while self.accept("."):
                target = Index(line, target, Literal(line, "string", self.name()))
            if self.accept(":"):
                method = self.name()
                target = Index(line, target, Literal(line, "string", method))
                return FunctionStat(line, target, self.funcbody(line, ["self"]))
            return FunctionStat(line, target, self.funcbody(line))
        if self.accept("local"):
            if self.accept("function"):
                name = self.name()
                return LocalFunction(line, name, self.funcbody(line))
            names = [self.name()]
            while self.accept(","):
                names.append(self.name())
            exprs = self.exprlist() if self.accept("=") else []
            return Local(line, names, exprs)
        # an assignment or a call statement
        first = self.suffixedexp()
        if self.check("=") or self.check(","):
            targets = [first]
            while self.accept(","):
                targets.append(self.suffixedexp())
            self.expect("=")
            for target in targets:
                if not isinstance(target, Name | Index):
                    raise LuaSyntaxError(f"line {line}: cannot assign to {target}")
            return Assign(line, targets, self.exprlist())
        if not isinstance(first, Call):
            raise LuaSyntaxError(f"line {line}: syntax error near {self.tok.value!r}")
        return CallStat(line, first)

    def funcbody(self, line: int, params: list[str] | None = None) -> Function:
        params = list(params or [])
        self.expect("(")
        if not self.check(")"):
            while True:
                if self.accept("..."):
                    params.append("...")
                    break
                params.append(self.name())
                if not self.accept(","):
                    break
        self.expect(")")
        func = Function(line, params, [])
        self.functions.append(func)
        func.body = self.block()
        self.functions.pop()
        self.expect("end")
        return func

    # -- expressions
    def exprlist(self) -> list[Node]:
        exprs = [self.expr()]
        while self.accept(","):
            exprs.append(self.expr())
        return exprs

    def expr(self, limit: int = 0) -> Node:
        t = self.tok
        if (t.kind == "keyword" and t.value == "not") or (t.kind == "op" and t.value in ("-", "#")):
            self.pos += 1
            left: Node = UnOp(t.line, t.value, self.expr(UNARY_PRIORITY))
        else:
            left = self.simpleexp()
        while True:
            t = self.tok
            op = t.value if t.kind in ("op", "keyword") else None
            if op not in BINARY or BINARY[op][0] <= limit:
                return left
            self.pos += 1
            left = BinOp(t.line, op, left, self.expr(BINARY[op][1]))

    def simpleexp(self) -> Node:
        t = self.tok
        line = t.line
        if t.kind == "number":
            self.pos += 1
            return Literal(line, "number", t.value)
        if t.kind == "string":
            self.pos += 1
            return Literal(line, "string", t.value)
        if t.kind == "keyword" and t.value in ("nil", "true", "false"):
            self.pos += 1
            return Literal(line, t.value)
        if self.accept("..."):
            return Literal(line, "vararg")
        if self.accept("function"):
            return self.funcbody(line)
        if self.check("{"):
            return self.table()
        return self.suffixedexp()

    def primaryexp(self) -> Node:
        t = self.tok
        if t.kind == "name":
            self.pos += 1
            return Name(t.line, t.value)
        if self.accept("("):
            inner = self.expr()
            self.expect(")")
            return Paren(t.line, inner)
        raise LuaSyntaxError(f"line {t.line}: unexpected {t.value!r}")

    def suffixedexp(self) -> Node:
        node = self.primaryexp()
        while True:
            t = self.tok
            if self.accept("."):
                node = Index(t.line, node, Literal(t.line, "string", self.name()))
            elif self.accept("["):
                key = self.expr()
                self.expect("]")
                node = Index(t.line, node, key)
            elif self.accept(":"):
                method = self.name()
                node = Call(t.line, node, self.callargs(), method)
            elif self.check("(") or self.check("{") or t.kind == "string":
                node = Call(t.line, node, self.callargs())
            else:
                return node

    def callargs(self) -> list[Node]:
        t = self.tok
        if t.kind == "string":
            self.pos += 1
            return [Literal(t.line, "string", t.value)]
        if self.check("{"):
            return [self.table()]
        self.expect("(")
        if self.accept(")"):
            return []
        args = self.exprlist()
        self.expect(")")
        return args

    def table(self) -> Table:
        line = self.expect("{").line
        items: list[tuple[Node | None, Node]] = []
        while not self.check("}"):
            if self.accept("["):
                key = self.expr()
                self.expect("]")
                self.expect("=")
                items.append((key, self.expr()))
            elif (
                self.tok.kind == "name"
                and self.toks[self.pos + 1].value == "="
                and self.toks[self.pos + 1].kind == "op"
            ):
                key_tok = self.tok
                self.pos += 2
                items.append((Literal(key_tok.line, "string", key_tok.value), self.expr()))
            else:
                items.append((None, self.expr()))
            if not (self.accept(",") or self.accept(";")):
                break
        self.expect("}")
        return Table(line, items)


# ---------------------------------------------------------------- scopes and bindings


@dataclass(eq=False)
class Binding:
    name: str
    line: int
    is_global: bool = False
    sources: list[tuple[Any, ...]] = field(default_factory=list)
    calls: list[tuple[list[Node], int]] = field(default_factory=list)  # (args, line)


@dataclass(eq=False)
class Env:
    parent: Env | None
    name: str | None = None
    binding: Binding | None = None

    def declare(self, binding: Binding) -> Env:
        return Env(self, binding.name, binding)

    def lookup(self, name: str) -> Binding | None:
        env: Env | None = self
        while env is not None:
            if env.name == name:
                return env.binding
            env = env.parent
        return None


@dataclass(frozen=True)
class Finding:
    line: int
    text: str
    leaf: int = 0  # the line where the untagged value comes from


class Unit:
    """One piece of Lua as Redis runs it, walked once; key arguments checked afterwards."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.lines = src.splitlines()
        self.globals: dict[str, Binding] = {}
        self.stores: list[tuple[Node, Node, Node]] = []  # (table expr, key expr, value expr)
        self.redis_calls: list[Call] = []
        self.problems: list[Finding] = []
        self._previous: dict[int, Any] = {}
        self._final: dict[int, Any] = {}
        self._final_contents: dict[tuple[int, str | None], list[Node]] = {}
        # Lookups of the static parts of ``contents`` (which items and stores may hold a
        # field), computed once per field instead of on every visit of the fixpoint.
        self._items_by_field: dict[tuple[int, str | None], list[Node]] = {}
        self._stores_by_field: dict[str | None, list[tuple[Node, Node]]] = {}
        self._stores_indexed = 0
        body = Parser(src).chunk()
        self.walk_block(body, Env(None))

    # -- walking: bind names, record assignments, calls and stores
    def binding_of(self, name: Name) -> Binding:
        found = name.env.lookup(name.name) if name.env is not None else None
        if found is None:
            found = self.globals.get(name.name)
            if found is None:
                found = self.globals[name.name] = Binding(name.name, name.line, is_global=True)
        return found

    def walk_block(self, stats: list[Node], env: Env) -> Env:
        for stat in stats:
            env = self.walk_stat(stat, env)
        return env

    def assign_sources(self, exprs: list[Node], count: int) -> list[tuple[Any, ...] | None]:
        """Per target: ("expr", e) or ("result", call, i) (the i-th value of a call)."""
        out: list[tuple[Any, ...] | None] = []
        for i in range(count):
            if i < len(exprs) - 1 or (i == len(exprs) - 1 and not isinstance(exprs[i], Call)):
                out.append(("expr", exprs[i]))
            elif exprs and isinstance(exprs[-1], Call) and i >= len(exprs) - 1:
                out.append(("result", exprs[-1], i - (len(exprs) - 1)))
            else:
                out.append(None)  # nil
        return out

    def bind_value(self, binding: Binding, source: tuple[Any, ...] | None) -> None:
        if source is None:
            return
        binding.sources.append(source)
        if source[0] == "expr" and isinstance(source[1], Function):
            source[1].bound.append(binding)

    def walk_stat(self, stat: Node, env: Env) -> Env:
        if isinstance(stat, Local):
            for e in stat.exprs:
                self.walk_expr(e, env, bound=len(stat.names) == len(stat.exprs))
            sources = self.assign_sources(stat.exprs, len(stat.names))
            for name, source in zip(stat.names, sources, strict=True):
                binding = Binding(name, stat.line)
                self.bind_value(binding, source)
                env = env.declare(binding)
            return env
        if isinstance(stat, LocalFunction):
            binding = Binding(stat.name, stat.line)
            env = env.declare(binding)
            self.bind_value(binding, ("expr", stat.func))
            self.walk_function(stat.func, env)
            return env
        if isinstance(stat, FunctionStat):
            self.walk_assign([stat.target], [stat.func], env)
            self.walk_function(stat.func, env, bound=True)
            return env
        if isinstance(stat, Assign):
            for e in stat.exprs:
                if not isinstance(e, Function):
                    self.walk_expr(e, env)
            self.walk_assign(stat.targets, stat.exprs, env)
            for e in stat.exprs:
                if isinstance(e, Function):
                    self.walk_function(e, env, bound=len(stat.targets) == len(stat.exprs))
            return env
        if isinstance(stat, CallStat):
            self.walk_expr(stat.call, env)
            return env
        if isinstance(stat, Do):
            self.walk_block(stat.body, env)
            return env
        if isinstance(stat, While):
            self.walk_expr(stat.cond, env)
            self.walk_block(stat.body, env)
            return env
        if isinstance(stat, Repeat):
            inner = self.walk_block(stat.body, env)
            self.walk_expr(stat.cond, inner)
            return env
        if isinstance(stat, If):
            for cond, block in zip(stat.conds, stat.blocks, strict=True):
                self.walk_expr(cond, env)
                self.walk_block(block, env)
            if stat.orelse is not None:
                self.walk_block(stat.orelse, env)
            return env
        if isinstance(stat, NumFor):
            for e in (stat.start, stat.stop, stat.step):
                if e is not None:
                    self.walk_expr(e, env)
            binding = Binding(stat.var, stat.line, sources=[("number",)])
            self.walk_block(stat.body, env.declare(binding))
            return env
        if isinstance(stat, GenFor):
            for e in stat.exprs:
                self.walk_expr(e, env)
            inner = env
            for index, name in enumerate(stat.names):
                binding = Binding(name, stat.line, sources=[("loop", stat.exprs, index)])
                inner = inner.declare(binding)
            self.walk_block(stat.body, inner)
            return env
        if isinstance(stat, Return):
            for e in stat.exprs:
                self.walk_expr(e, env)
            return env
        if isinstance(stat, Break):
            return env
        raise AssertionError(f"unknown statement {stat!r}")

    def walk_assign(self, targets: list[Node], exprs: list[Node], env: Env) -> None:
        sources = self.assign_sources(exprs, len(targets))
        for target, source in zip(targets, sources, strict=True):
            if isinstance(target, Name):
                target.env = env
                self.check_name_use(target)
                self.bind_value(self.binding_of(target), source)
            else:
                assert isinstance(target, Index)
                self.walk_expr(target.obj, env)
                self.walk_expr(target.key, env)
                if source is not None and source[0] == "expr":
                    self.stores.append((target.obj, target.key, source[1]))
                elif source is not None:
                    self.stores.append((target.obj, target.key, Literal(target.line, RESULT)))

    def walk_function(self, func: Function, env: Env, bound: bool = True) -> None:
        if not bound:
            func.escapes = True
        inner = env
        for index, param in enumerate(func.params):
            binding = Binding(param, func.line, sources=[("param", func, index)])
            inner = inner.declare(binding)
        self.walk_block(func.body, inner)

    def check_name_use(self, name: Name) -> None:
        if name.name in FORBIDDEN_GLOBALS and self.binding_of(name).is_global:
            self.problems.append(Finding(name.line, f"dynamic code: {name.name}"))

    def walk_expr(self, e: Node, env: Env, bound: bool = False) -> None:
        if isinstance(e, Name):
            e.env = env
            self.check_name_use(e)
            binding = self.binding_of(e)
            if e.name == "KEYS" and binding.is_global:
                self.problems.append(Finding(e.line, "KEYS used other than as KEYS[1]"))
            for source in binding.sources:  # a function referenced as a value escapes
                if source[0] == "expr" and isinstance(source[1], Function):
                    source[1].escapes = True
        elif isinstance(e, Index):
            if _is_redis_member(e):
                self.problems.append(Finding(e.line, f"redis.{e.key.value} used as a value"))  # type: ignore[attr-defined]
                return
            if isinstance(e.obj, Name) and e.obj.name == "KEYS":
                e.obj.env = env
                if self.binding_of(e.obj).is_global:
                    if not (
                        isinstance(e.key, Literal)
                        and e.key.kind == "number"
                        and float(e.key.value) == 1
                    ):
                        self.problems.append(Finding(e.line, "KEYS indexed other than KEYS[1]"))
                    self.walk_expr(e.key, env)
                    return
            self.walk_expr(e.obj, env)
            self.walk_expr(e.key, env)
        elif isinstance(e, Call):
            if isinstance(e.func, Index) and _is_redis_member(e.func) and e.method is None:
                member = e.func.key.value  # type: ignore[attr-defined]
                if member in ("call", "pcall"):
                    self.redis_calls.append(e)
                elif member == "register_function":
                    # register_function(name, callback) or register_function{..., callback=...}
                    for arg in e.args:
                        if isinstance(arg, Function):
                            arg.register_callback = True
                        elif isinstance(arg, Table):
                            for key, value in arg.items:
                                if (
                                    isinstance(key, Literal)
                                    and key.value == "callback"
                                    and isinstance(value, Function)
                                ):
                                    value.register_callback = True
                for arg in e.args:
                    if isinstance(arg, Table):
                        for key, value in arg.items:
                            if isinstance(value, Function):
                                self.walk_function(value, env, bound=not value.register_callback)
                                if value.register_callback:
                                    value.escapes = False
                            else:
                                if key is not None:
                                    self.walk_expr(key, env)
                                self.walk_expr(value, env)
                        continue
                    if isinstance(arg, Function):
                        self.walk_function(arg, env, bound=not arg.register_callback)
                        if arg.register_callback:
                            arg.escapes = False
                    else:
                        self.walk_expr(arg, env)
                return
            if isinstance(e.func, Name) and e.method is None:
                e.func.env = env
                self.check_name_use(e.func)
                binding = self.binding_of(e.func)
                binding.calls.append((e.args, e.line))
                if e.func.name in ("table",):
                    pass
            else:
                self.walk_expr(e.func, env)
            # table.insert(t, v) stores v into t
            if (
                isinstance(e.func, Index)
                and isinstance(e.func.obj, Name)
                and e.func.obj.name == "table"
                and isinstance(e.func.key, Literal)
                and e.func.key.value == "insert"
                and e.args
            ):
                self.stores.append((e.args[0], Literal(e.line, "computed key"), e.args[-1]))
            for arg in e.args:
                if isinstance(arg, Function):
                    self.walk_function(arg, env, bound=False)
                else:
                    self.walk_expr(arg, env)
        elif isinstance(e, Function):
            self.walk_function(e, env, bound=bound)
        elif isinstance(e, Table):
            for key, value in e.items:
                if key is not None:
                    self.walk_expr(key, env)
                if isinstance(value, Function):
                    self.walk_function(value, env, bound=False)
                else:
                    self.walk_expr(value, env)
        elif isinstance(e, BinOp):
            self.walk_expr(e.left, env)
            self.walk_expr(e.right, env)
        elif isinstance(e, UnOp):
            self.walk_expr(e.operand, env)
        elif isinstance(e, Paren):
            self.walk_expr(e.inner, env)
        elif isinstance(e, Literal):
            pass
        else:
            raise AssertionError(f"unknown expression {e!r}")

    # -- the key check
    def check_keys(self) -> list[Finding]:
        findings = list(self.problems)
        for call in self.redis_calls:
            if not call.args or not (
                isinstance(call.args[0], Literal) and call.args[0].kind == "string"
            ):
                findings.append(
                    Finding(call.line, "redis.call with a command name that is not a literal")
                )
                continue
            command = call.args[0].value.upper()
            spec = KEY_ARGS.get(command)
            if spec is None:
                findings.append(
                    Finding(call.line, f"{command}: unknown key positions (add it to KEY_ARGS)")
                )
                continue
            rest = call.args[1:]
            keys = rest if spec == "all" else rest[spec - 1 : spec]  # type: ignore[operator]
            if not keys:
                findings.append(Finding(call.line, f"{command} without a key argument"))
            for key in keys:
                if isinstance(key, Call) and _callee_name(key) == "unpack" and key.args:
                    leaves = [self.tagged(v) for v in self.contents(key.args[0], None)]
                    leaves = leaves or [Finding(call.line, "unpack of an unknown table")]
                    why = next((leaf for leaf in leaves if leaf is not None), None)
                else:
                    why = self.tagged(key)
                if why is not None:
                    findings.append(
                        Finding(
                            call.line,
                            f"{command} key is not under the tag: {why.text}",
                            why.line,
                        )
                    )
        return findings

    def line_text(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def tagged(self, e: Node, seen: set[int] | None = None) -> Finding | None:
        """None when ``e`` is provably under the tag; else the first untagged leaf."""
        seen = set() if seen is None else seen
        if id(e) in seen:
            return None  # a cycle adds no new origin
        seen.add(id(e))
        if isinstance(e, Paren):
            return self.tagged(e.inner, seen)
        if isinstance(e, BinOp):
            if e.op == "..":
                return self.tagged(e.left, seen)
            if e.op == "or":
                return self.tagged(e.left, seen) or self.tagged(e.right, seen)
            if e.op == "and":
                return self.tagged(e.right, seen)
            return Finding(e.line, f"the result of {e.op!r}")
        if isinstance(e, Index):
            if (
                self.is_keys_table(e.obj)
                and isinstance(e.key, Literal)
                and e.key.kind == "number"
                and float(e.key.value) == 1
            ):
                return None  # KEYS[1]: the tag itself
            if isinstance(e.obj, Name) and e.obj.name == "ARGV":
                return Finding(e.line, "an ARGV item")
            for value in self.contents(e.obj, e.key):  # none stored: nil, no key at all
                why = self.tagged(value, seen)
                if why is not None:
                    return why
            return None
        if isinstance(e, Name):
            return self.binding_tagged(self.binding_of(e), e, seen)
        if isinstance(e, Call):
            funcs = self.callees(e)
            if funcs is None:
                return Finding(e.line, "the reply of a call that is not a local function")
            return self.results_tagged(funcs, 0, e.line, seen)
        if isinstance(e, Literal):
            if e.kind in OPAQUE:
                return Finding(e.line, e.kind)
            return Finding(e.line, f"a {e.kind} literal" + (f" {e.value!r}" if e.value else ""))
        return Finding(e.line, f"a {type(e).__name__.lower()}")

    def binding_tagged(self, binding: Binding, at: Node, seen: set[int]) -> Finding | None:
        if binding.is_global and binding.name == "ARGV":
            return Finding(at.line, "ARGV")
        if not binding.sources:
            return Finding(at.line, f"{binding.name!r}, never assigned")
        for source in binding.sources:
            why = self.source_tagged(source, binding, at, seen)
            if why is not None:
                return why
        return None

    def source_tagged(
        self, source: tuple[Any, ...], binding: Binding, at: Node, seen: set[int]
    ) -> Finding | None:
        kind = source[0]
        if kind == "expr":
            return self.tagged(source[1], seen)
        if kind == "result":
            funcs = self.callees(source[1])
            if funcs is None:
                return Finding(source[1].line, "the reply of a call that is not a local function")
            return self.results_tagged(funcs, source[2], source[1].line, seen)
        if kind == "number":
            return Finding(binding.line, f"{binding.name!r}, a numeric loop counter")
        if kind == "param":
            func, index = source[1], source[2]
            if func.register_callback:
                return Finding(func.line, f"parameter {binding.name!r} of a Function callback")
            if func.escapes:
                return Finding(
                    func.line,
                    f"parameter {binding.name!r} of a function whose callers are not all visible",
                )
            for owner in func.bound:
                for args, line in owner.calls:
                    if index >= len(args):
                        return Finding(line, f"parameter {binding.name!r} left out by a call")
                    why = self.tagged(args[index], seen)
                    if why is not None:
                        return why
            return None
        if kind == "loop":
            exprs, index = source[1], source[2]
            if (
                len(exprs) == 1
                and isinstance(exprs[0], Call)
                and _callee_name(exprs[0]) in ("ipairs", "pairs")
                and exprs[0].args
            ):
                table = exprs[0].args[0]
                if index == 1:
                    values = self.contents(table, None)
                elif _callee_name(exprs[0]) == "pairs":
                    values = self.table_keys(table)
                else:
                    return Finding(binding.line, f"{binding.name!r}, an ipairs index")
                for value in values:  # none stored: the loop never runs
                    why = self.tagged(value, seen)
                    if why is not None:
                        return why
                return None
            return Finding(binding.line, f"{binding.name!r}, a loop over an unknown iterator")
        raise AssertionError(source)

    def callees(self, call: Call) -> list[Function] | None:
        if call.method is not None or not isinstance(call.func, Name):
            return None
        binding = self.binding_of(call.func)
        funcs = [s[1] for s in binding.sources if s[0] == "expr" and isinstance(s[1], Function)]
        if not funcs or len(funcs) != len(binding.sources):
            return None
        return funcs

    def results_tagged(
        self, funcs: list[Function], index: int, line: int, seen: set[int]
    ) -> Finding | None:
        for func in funcs:
            if not func.returns:
                return Finding(func.line, "a function that returns nothing")
            for ret in func.returns:
                sources = self.assign_sources(ret.exprs, index + 1)
                source = sources[index]
                if source is None:
                    return Finding(ret.line, "a return without that value")
                why = self.source_tagged(source, Binding("<return>", ret.line), ret, seen)
                if why is not None:
                    return why
        return None

    def is_keys_table(self, e: Node) -> bool:
        if not isinstance(e, Name):
            return False
        binding = self.binding_of(e)
        if binding.is_global:
            return binding.name == "KEYS"
        if not binding.sources:
            return False
        for source in binding.sources:
            if source[0] == "param":
                if not (source[1].register_callback and source[2] == 0):
                    return False
            elif source[0] == "expr":
                if not self.is_keys_table(source[1]):
                    return False
            else:
                return False
        return True

    # -- tables: what an expression may denote, and what was stored there
    #
    # Computed as a fixpoint: a table's contents depend on the stores into every table
    # expression, whose meaning may depend on that same table (``h.buf = ...`` where
    # ``h`` comes out of ``heads``).  Each round recomputes from the previous round's
    # answers for the expressions still being worked out, until nothing grows.

    #
    # A round that changed nothing closes the system of every expression it worked out
    # (each depends only on expressions of the same round): those answers are final, and
    # later questions start from them (``_final``, ``_final_contents``) instead of
    # working the same tables out again.

    def _fix(self, compute: Any, *args: Any) -> Any:
        if self._stores_indexed != len(self.stores):
            # A store seen since the last answers (none today: the walk is over before
            # the first question) makes them stale.
            self._final.clear()
            self._final_contents.clear()
        while True:
            self._current: dict[int, Any] = {}
            self._current_contents: dict[tuple[int, str | None], list[Node]] = {}
            self._active: set[int] = set()
            result = compute(*args)
            if all(self._previous.get(k, frozenset()) == v for k, v in self._current.items()):
                self._final.update(self._current)
                self._final_contents.update(self._current_contents)
                return result
            self._previous.update(self._current)

    def origins(self, e: Node) -> frozenset[Any] | None:
        """The table constructors ``e`` may denote; None when unknown."""
        return self._fix(self._origins, e)  # type: ignore[no-any-return]

    def contents(self, table: Node, key: Node | None) -> list[Node]:
        """Every value stored under ``key`` (None: any key) in the tables ``table`` may denote.

        An unknown table gives a single opaque literal (so it never counts as tagged).
        """
        return self._fix(self._contents, table, key)  # type: ignore[no-any-return]

    def table_keys(self, table: Node) -> list[Node]:
        return self._fix(self._table_keys, table)  # type: ignore[no-any-return]

    def _origins(self, e: Node) -> frozenset[Any] | None:
        k = id(e)
        if k in self._final:
            return self._final[k]  # type: ignore[no-any-return]
        if k in self._current:
            return self._current[k]  # type: ignore[no-any-return]
        if k in self._active:
            return self._previous.get(k, frozenset())  # type: ignore[no-any-return]
        self._active.add(k)
        try:
            result = self._origins_of(e)
        finally:
            self._active.discard(k)
        self._current[k] = result
        return result

    @staticmethod
    def _union(parts: Iterator[frozenset[Any] | None]) -> frozenset[Any] | None:
        out: set[Any] = set()
        for part in parts:
            if part is None:
                return None
            out |= part
        return frozenset(out)

    def _origins_of(self, e: Node) -> frozenset[Any] | None:
        if isinstance(e, Table):
            return frozenset([e])
        if isinstance(e, Paren):
            return self._origins(e.inner)
        if isinstance(e, Name):
            binding = self.binding_of(e)
            if binding.is_global or not binding.sources:
                return None
            return self._union(self._source_origins(s) for s in binding.sources)
        if isinstance(e, Index):
            return self._union(self._origins(v) for v in self._contents(e.obj, e.key))
        if isinstance(e, Call):
            funcs = self.callees(e)
            if funcs is None:
                return None
            rets = [ret for func in funcs for ret in func.returns]
            if any(not ret.exprs for ret in rets):
                return None
            return self._union(self._origins(ret.exprs[0]) for ret in rets)
        if isinstance(e, BinOp) and e.op in ("and", "or"):
            return self._union(iter([self._origins(e.left), self._origins(e.right)]))
        if isinstance(e, Literal) and e.kind in OPAQUE:
            return None
        if isinstance(e, Literal | BinOp | UnOp | Function):
            return frozenset()  # strings, numbers, booleans, nil, functions: no table
        return None

    def _source_origins(self, source: tuple[Any, ...]) -> frozenset[Any] | None:
        if source[0] == "expr":
            return self._origins(source[1])
        if source[0] == "result":
            funcs, index = self.callees(source[1]), source[2]
            if funcs is None:
                return None
            values = []
            for ret in (ret for func in funcs for ret in func.returns):
                value = self.assign_sources(ret.exprs, index + 1)[index]
                if value is None:
                    continue  # nil: no table
                if value[0] != "expr":
                    return None
                values.append(value[1])
            return self._union(self._origins(v) for v in values)
        if source[0] == "param":
            func, index = source[1], source[2]
            if func.escapes or func.register_callback:
                return None
            calls = [args for owner in func.bound for args, _line in owner.calls]
            if any(index >= len(args) for args in calls):
                return None
            return self._union(self._origins(args[index]) for args in calls)
        if source[0] == "loop":
            exprs, index = source[1], source[2]
            if (
                index == 1
                and len(exprs) == 1
                and isinstance(exprs[0], Call)
                and _callee_name(exprs[0]) in ("ipairs", "pairs")
                and exprs[0].args
            ):
                return self._union(self._origins(v) for v in self._contents(exprs[0].args[0], None))
        return None

    def _contents(self, table: Node, key: Node | None) -> list[Node]:
        field_name = _field(key)
        k = (id(table), field_name)
        values = self._final_contents.get(k)
        if values is None:
            values = self._current_contents.get(k)
        if values is None:
            values = self._contents_of(table, field_name)
            self._current_contents[k] = values
        return list(values)

    def _contents_of(self, table: Node, field_name: str | None) -> list[Node]:
        origins = self._origins(table)
        if origins is None:
            return [Literal(table.line, UNKNOWN_VALUE)]
        values: list[Node] = []
        for origin in origins:
            values.extend(self._items_with(origin, field_name))
        for obj, value in self._stores_with(field_name):
            stored_in = self._origins(obj)
            if stored_in is None or stored_in & origins:
                values.append(value)
        return values

    def _items_with(self, table: Table, field_name: str | None) -> list[Node]:
        """The constructor items of ``table`` that may be its ``field_name`` (None: any)."""
        k = (id(table), field_name)
        items = self._items_by_field.get(k)
        if items is None:
            items = [
                value
                for item_key, value in table.items
                if field_name is None
                or (item_field := _field(item_key)) is None
                or item_field == field_name
            ]
            self._items_by_field[k] = items
        return items

    def _stores_with(self, field_name: str | None) -> list[tuple[Node, Node]]:
        """(table expr, value) of every store that may write ``field_name`` (None: any), in
        the order of ``self.stores``."""
        if self._stores_indexed != len(self.stores):
            self._stores_by_field.clear()
            self._stores_indexed = len(self.stores)
        stores = self._stores_by_field.get(field_name)
        if stores is None:
            stores = [
                (obj, value)
                for obj, store_key, value in self.stores
                if field_name is None
                or (store_field := _field(store_key)) is None
                or store_field == field_name
            ]
            self._stores_by_field[field_name] = stores
        return stores

    def _table_keys(self, table: Node) -> list[Node]:
        origins = self._origins(table)
        if origins is None:
            return [Literal(table.line, UNKNOWN_KEY)]
        keys: list[Node] = []
        for origin in origins:
            for item_key, value in origin.items:
                keys.append(item_key if item_key is not None else Literal(value.line, "number"))
        for obj, store_key, _value in self.stores:
            stored_in = self._origins(obj)
            if stored_in is None or stored_in & origins:
                keys.append(store_key)
        return keys


def _field(key: Node | None) -> str | None:
    """The field name of a ``.name`` / ``name =`` key; None for any computed key."""
    return key.value if isinstance(key, Literal) and key.kind == "string" else None


def _is_redis_member(e: Node) -> bool:
    return (
        isinstance(e, Index)
        and isinstance(e.obj, Name)
        and e.obj.name == "redis"
        and isinstance(e.key, Literal)
        and e.key.kind == "string"
    )


def _callee_name(call: Call) -> str | None:
    return call.func.name if isinstance(call.func, Name) and call.method is None else None


# ---------------------------------------------------------------- running the check


@dataclass(frozen=True)
class Report:
    where: str  # operation name or "library"
    line: int
    source: str  # "lib/keys.lua:34" style
    text: str
    code: str  # the offending source line
    leaf: str  # the source line the untagged value comes from


def eval_text(lua_dir: Path, name: str) -> tuple[str, list[tuple[str, int]]]:
    """``script_text(name)`` for the files of ``lua_dir``, and a line -> (file, line) map."""
    parts: list[tuple[str, str]] = []
    for path in store_scripts.helper_paths(lua_dir):
        parts.append((f"-- >>> lib/{path.name}", f"lib/{path.name}"))
        parts.append((path.read_text(encoding="utf-8"), f"lib/{path.name}"))
    parts.append(("begin_call(KEYS[1])", "<scripts.py>"))
    parts.append((f"-- >>> {name}.lua", "<scripts.py>"))
    parts.append(("local op_reply = (function()", "<scripts.py>"))
    parts.append(((lua_dir / f"{name}.lua").read_text(encoding="utf-8"), f"{name}.lua"))
    parts.append(("end)()\nTALLY.flush()\nEVENTS.flush()\nreturn op_reply", "<scripts.py>"))
    text_lines: list[str] = []
    origin: list[tuple[str, int]] = []
    for chunk, file in parts:
        for number, line in enumerate(chunk.split("\n"), 1):
            text_lines.append(line)
            origin.append((file, number))
    return "\n".join(text_lines), origin


@functools.lru_cache(maxsize=128)
def unit_for(text: str) -> Unit:
    """Parsed and walked once per text (several tests read the same operations)."""
    return Unit(text)


def check_unit(where: str, text: str, origin: list[tuple[str, int]] | None = None) -> list[Report]:
    unit = unit_for(text)
    reports = []
    for finding in unit.check_keys():
        code = unit.line_text(finding.line)
        leaf = unit.line_text(finding.leaf) if finding.leaf else code
        if any(where in (op, "library") and leaf == ok for op, ok in ALLOWED_UNTAGGED):
            continue
        text = finding.text
        if finding.leaf:
            text += f" (from {_place(origin, finding.leaf)}: {leaf!r})"
        reports.append(Report(where, finding.line, _place(origin, finding.line), text, code, leaf))
    return reports


def _place(origin: list[tuple[str, int]] | None, line: int) -> str:
    file, number = origin[line - 1] if origin else ("library", line)
    return f"{file}:{number}"


def check_lua_dir(lua_dir: Path, only: list[str] | None = None) -> list[Report]:
    names = only or sorted(p.stem for p in lua_dir.glob("*.lua"))
    reports: list[Report] = []
    for name in names:
        text, origin = eval_text(lua_dir, name)
        reports.extend(check_unit(name, text, origin))
    return reports


def format_reports(reports: list[Report]) -> str:
    return "\n".join(f"{r.where}: {r.source}: {r.text}\n    {r.code}" for r in reports)


# ---------------------------------------------------------------- the tests


def test_the_check_reads_exactly_what_redis_runs() -> None:
    for name in store_scripts.script_names():
        text, _ = eval_text(LUA_DIR, name)
        assert text == SHIPPED_SCRIPT_TEXT(name)


@pytest.mark.parametrize("name", store_scripts.script_names())
def test_every_key_of_every_operation_is_under_the_store_tag(name: str) -> None:
    # One test per operation: each walks the helpers again (~2 s), so the parallel
    # workers share them instead of one worker walking all of them in a row.
    reports = check_lua_dir(LUA_DIR, [name])
    assert not reports, "keys outside the store's hash tag:\n" + format_reports(reports)


def test_every_key_of_the_function_library_is_under_the_store_tag() -> None:
    _lib, code = store_scripts.library()
    body = code.split("\n", 1)[1]  # drop the "#!lua name=..." shebang line
    reports = check_unit("library", body)  # list's ARGV sources match ALLOWED_UNTAGGED
    assert not reports, "keys outside the store's hash tag:\n" + format_reports(reports)


def test_the_allowed_exception_is_still_needed() -> None:
    """Every ALLOWED_UNTAGGED entry still matches code (stale exceptions are removed)."""
    for where, code in ALLOWED_UNTAGGED:
        assert code in (LUA_DIR / f"{where}.lua").read_text(encoding="utf-8")


def test_list_sources_are_always_store_keys() -> None:
    """The other half of the list exception: every source plan_list_query routes to is a
    key of the store (under its tag), for every combination of filters and orders."""
    keys = StoreKeys("tenant:a")
    queues, names = [None, "q", "we:ird\0q"], [None, "Job", "na:me"]
    state_sets: list[Any] = [None, ["waiting"], ["completed", "failed"], list(ALL_STATES)]
    routes = 0
    for queue, name, states, metadata, order_by, order, idx in product(
        queues, names, state_sets, [None, {"k": "v"}], ORDER_FIELDS, ["asc", "desc"],
        [{"name": True, "queue": True}, {"name": False, "queue": True}, {"name": False, "queue": False}],
    ):  # fmt: skip
        try:
            plan = plan_list_query(keys, idx, queue, name, states, metadata, order_by, order)
        except Exception:  # an unsupported combination is refused before any script runs
            continue
        for source in plan.sources:
            assert source.startswith(keys.tag + ":"), (source, queue, name, states, order_by)
        routes += 1
    assert routes > 50


# -- the check bites: broken Lua must be reported


def _scratch_copy(tmp_path: Path) -> Path:
    target = tmp_path / "lua"
    shutil.copytree(LUA_DIR, target)
    return target


def _inject(lua_dir: Path, file: str, old: str, new: str) -> None:
    path = lua_dir / file
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {file}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


MUTATIONS = {
    "literal key": (
        "promote.lua", "", "redis.call('INCR', 'mq:promotions')\n", "INCR key",
    ),
    "key from ARGV": (
        "promote.lua", "", "redis.call('DEL', ARGV[1])\n", "DEL key",
    ),
    "ARGV through a local": (
        "promote.lua", "", "local k = ARGV[2]\nredis.call('HGET', k, 'x')\n", "HGET key",
    ),
    "ARGV through a helper's parameter": (
        "promote.lua", "",
        "local function touch(key) return redis.call('EXISTS', key) end\n"
        "touch(k_job('x'))\ntouch(ARGV[1])\n",
        "EXISTS key",
    ),
    "key read from a hash": (
        "promote.lua", "",
        "local other = redis.call('HGET', k_job(ARGV[1]), 'mirror')\nredis.call('DEL', other)\n",
        "DEL key",
    ),
    "second declared key": (
        "promote.lua", "", "redis.call('GET', KEYS[2])\n", "KEYS indexed other than KEYS[1]",
    ),
    "tag concatenated after a prefix": (
        "promote.lua", "", "redis.call('GET', 'copy:' .. B)\n", "GET key",
    ),
    "redis.call aliased": (
        "promote.lua", "", "local call = redis.call\ncall('GET', 'x')\n", "redis.call used as a value",
    ),
    "command name not literal": (
        "promote.lua", "", "local cmd = 'GET'\nredis.call(cmd, k_job('x'))\n", "not a literal",
    ),
    "command of unknown key positions": (
        "promote.lua", "",
        "redis.call('ZUNIONSTORE', k_job('d'), 2, k_job('a'), 'other')\n",
        "ZUNIONSTORE: unknown key positions",
    ),
    "a builder that drops the tag": (
        "lib/keys.lua",
        "local function k_job(id) return B .. ':job:' .. id end",
        "local function k_job(id) return 'job:' .. id end",
        "is not under the tag",
    ),
    "a constant built from ARGV": (
        "lib/keys.lua", "K_SEQ = B .. ':seq'", "K_SEQ = ARGV[1] .. ':seq'", "INCR key",
    ),
    "a table of keys with one foreign member": (
        "lib/rows.lua",
        "local function flush_acc(acc)",
        "local function poison(acc) push_keyed(acc.zsets, acc.order, 'elsewhere', 0, 'm') end\n"
        "local function flush_acc(acc)",
        "ZADD key",
    ),
    "a held set write with a foreign key": (
        "lib/retention.lua",
        "local function flush_held()",
        "local function poison(id) push_keyed(HELD.zadd, HELD.order, 'elsewhere', 0, id) end\n"
        "local function flush_held()",
        "ZADD key",
    ),
    "ARGV in a multiple assignment": (
        "sweep_history.lua",
        "source, upto = K_KEEPAGE, ARGV[2]",
        "source, upto = ARGV[2], K_KEEPAGE",
        "ZRANGEBYSCORE key",
    ),
    "a table field built from a literal": (
        "list.lua",
        "local h = { key = key, rank",
        "local h = { key = 'copy:' .. key, rank",
        "ZREM key",
    ),
    "keys of a table filled from ARGV": (
        "promote.lua", "",
        "local t = {}\nt[ARGV[1]] = true\nfor k in pairs(t) do redis.call('DEL', k) end\n",
        "DEL key",
    ),
    "a helper returning ARGV": (
        "promote.lua", "",
        "local function pick() return ARGV[1] end\nredis.call('GET', pick())\n",
        "GET key",
    ),
    "a global assigned from ARGV": (
        "promote.lua", "", "LAST = ARGV[1]\nredis.call('GET', LAST)\n", "GET key",
    ),
    "dynamic code": (
        "promote.lua", "", "loadstring('return 1')()\n", "dynamic code: loadstring",
    ),
}  # fmt: skip


# The operations that run the code a helper mutation changes.
HELPER_MUTATION_OPS = {
    "a builder that drops the tag": ["enqueue", "promote"],  # k_job: direct, and through helpers
    "a constant built from ARGV": ["enqueue"],  # K_SEQ: insert_job's INCR
    "a table of keys with one foreign member": ["enqueue_many"],  # flush_acc's ZADDs
    "a held set write with a foreign key": ["ack_claim_many"],  # flush_held's ZADDs
}


def test_every_helper_mutation_names_its_operations() -> None:
    helper_mutations = {m for m, spec in MUTATIONS.items() if spec[0].startswith("lib/")}
    assert helper_mutations == set(HELPER_MUTATION_OPS)
    for ops in HELPER_MUTATION_OPS.values():
        assert set(ops) <= set(store_scripts.script_names())


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_check_catches_a_bad_key(tmp_path: Path, mutation: str) -> None:
    file, old, new, expected = MUTATIONS[mutation]
    lua_dir = _scratch_copy(tmp_path)
    if old:
        _inject(lua_dir, file, old, new)
    else:  # at the top of the operation (its last statement is a return)
        path = lua_dir / file
        path.write_text(new + path.read_text(encoding="utf-8"), encoding="utf-8")
    # An operation file only affects that operation; a helper mutation is checked in the
    # operations that run the mutated code (every operation includes every helper, and
    # walking all of them per mutation would take ~12 s each).
    reports = check_lua_dir(lua_dir, HELPER_MUTATION_OPS.get(mutation, [Path(file).stem]))
    assert reports, f"{mutation}: not reported"
    assert any(expected in r.text for r in reports), format_reports(reports)
    # Only the mutated file (or, for helpers, the operations that include it) is blamed.
    if not file.startswith("lib/"):
        assert {r.where for r in reports} == {Path(file).stem}, format_reports(reports)


def test_the_unmodified_scratch_copy_is_clean(tmp_path: Path) -> None:
    """The mutation tests start from the shipped code: the scratch copy gives every
    operation the very text the shipped files give (which the per-operation test above
    finds clean), so a report in a mutation test comes from the mutation."""
    scratch = _scratch_copy(tmp_path)
    for name in store_scripts.script_names():
        assert eval_text(scratch, name)[0] == eval_text(LUA_DIR, name)[0], name
    assert check_lua_dir(scratch, ["promote"]) == []


def test_the_parser_reads_every_shipped_file() -> None:
    """Each file parses on its own too (a parse error must not hide behind the preamble)."""
    for path in sorted(LUA_DIR.rglob("*.lua")):
        Parser(path.read_text(encoding="utf-8")).chunk()


def iter_redis_calls(text: str) -> Iterator[Call]:
    yield from unit_for(text).redis_calls


def test_the_check_sees_every_redis_call() -> None:
    """The parser finds as many redis.call/pcall sites as a plain text search does."""
    for name in store_scripts.script_names():
        text, _ = eval_text(LUA_DIR, name)
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        assert len(list(iter_redis_calls(text))) == len(re.findall(r"redis\.p?call\(", code)), name
