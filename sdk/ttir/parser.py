"""TTIR text (as Triton 3.6-3.9 print it, with or without debug locations) -> `sdk.ttir.ir.Module`.

Ops are read in MLIR's generic form (`"tt.reduce"(%x) <{...}> ({...}) : (...) -> ...`) and in the
custom forms Triton's dialects print. For custom forms the reader takes operands in order, the
`: types` signature, attribute dictionaries, `key = value` pairs and bare keywords (predicates,
atomic kinds), and derives result types from the signature with a few per-op rules.
"""
from __future__ import annotations

import os
import re

from .ir import (Block, Func, FunctionType, Loc, Module, Op, PointerType, Region, ScalarType, SymbolRef,
                 TensorDescType, TensorType, Type, Value)
from .lexer import Token, TTIRSyntaxError, tokenize
from .types import parse_dense, parse_number, parse_type

_AXES = {"x": 0, "y": 1, "z": 2}
_STRUCTURAL = {"to", "step", "iter_args", "else", "do", "attributes"}
_TYPE_WORDS = re.compile(r"^(i\d+|ui\d+|f\d+|bf16|tf32|f8E\w+|index)$")
_RESULTS = re.compile(r"^(%[A-Za-z0-9_.$\-]+)(?::(\d+))?(#\d+)?$")
#: how deeply regions, attribute lists, types and locations may nest (Triton's TTIR nests a few
#: levels); deeper text is refused with a parse error instead of exhausting Python's stack
MAX_NESTING = 64
#: the most results one op may declare (`%x:N = ...`); a larger count is refused, not allocated
MAX_RESULTS = 4096


def parse(text: str | bytes) -> Module:
    """Read TTIR text (or its UTF-8 bytes, as a compiled artifact holds them) into a Module.
    Raises TTIRSyntaxError naming the line on malformed input.

    Every loop consumes input or fails, and nesting, result counts and literals are bounded, so any
    text (a truncated or corrupted artifact included) ends in a Module or a TTIRSyntaxError.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TTIRSyntaxError(f"TTIR: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return _Parser(text).module()


class _Parser:
    def __init__(self, text: str):
        self.text = text
        toks = tokenize(text)
        self.loc_defs: dict[str, str] = {}
        self.toks = self._strip_aliases(toks)
        self.i = 0
        self.scopes: list[dict[str, Value]] = [{}]
        self.depth = 0
        self._loc_cache: dict[str, Loc | None] = {}
        self._triton_dir = _triton_dir()

    # ------------------------------------------------------------------------ token helpers
    def _strip_aliases(self, toks: list[Token]) -> list[Token]:
        out, i = [], 0
        while i < len(toks):
            t = toks[i]
            if (t.kind == "attr" and i + 2 < len(toks) and toks[i + 1].text == "="
                    and (i == 0 or toks[i - 1].kind == "nl")):
                if toks[i + 2].kind == "loc":
                    self.loc_defs[t.text] = toks[i + 2].text
                j = i + 2  # skip the whole alias line (locations and ttgir layout aliases)
                while j < len(toks) and toks[j].kind != "nl":
                    j += 1
                i = j
                continue
            out.append(t)
            i += 1
        return out

    def peek(self, k: int = 0) -> Token:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else Token("eof", "", -1)

    def next(self) -> Token:
        if self.i >= len(self.toks):  # every loop that reads on stops here on truncated text
            line = self.toks[-1].line if self.toks else 1
            raise TTIRSyntaxError(f"TTIR line {line}: unexpected end of text")
        t = self.toks[self.i]
        self.i += 1
        return t

    def enter(self, what: str) -> None:
        """One level deeper into nested regions, attribute lists or types; refused past MAX_NESTING."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"{what} nested more than {MAX_NESTING} levels deep")

    def leave(self) -> None:
        self.depth -= 1

    def skip_nl(self) -> None:
        while self.peek().kind == "nl":
            self.i += 1

    def expect(self, text: str) -> Token:
        t = self.next()
        if t.text != text:
            raise TTIRSyntaxError(f"TTIR line {t.line}: expected '{text}', found '{t.text or 'end of text'}'")
        return t

    def error(self, msg: str) -> TTIRSyntaxError:
        return TTIRSyntaxError(f"TTIR line {self.peek().line}: {msg}")

    # ------------------------------------------------------------------------------ scopes
    def define(self, name: str, type_: Type) -> Value:
        v = Value(name, type_)
        self.scopes[-1][name] = v
        return v

    def lookup(self, name: str, line: int) -> Value:
        for key in (name, name.split("#")[0], name + "#0"):
            for scope in reversed(self.scopes):
                if key in scope:
                    return scope[key]
        raise TTIRSyntaxError(f"TTIR line {line}: use of undefined value {name}")

    # ----------------------------------------------------------------------------- module
    def module(self) -> Module:
        self.skip_nl()
        funcs: dict[str, Func] = {}
        attrs: dict = {}
        if self.peek().text == "module":
            self.next()
            if self.peek().text == "attributes":
                self.next()
                attrs = self.attr_dict()
            self.expect("{")
            while True:
                self.skip_nl()
                if self.peek().text == "}":
                    self.next()
                    break
                f = self.func()
                funcs[f.name] = f
            if self.peek().kind == "loc":
                self.next()
        else:
            while self.peek().kind != "eof":
                f = self.func()
                funcs[f.name] = f
                self.skip_nl()
        if not funcs:
            raise TTIRSyntaxError("TTIR: no tt.func in the module")
        return Module(funcs, self.text, attrs)

    def func(self) -> Func:
        t = self.next()
        if t.text != "tt.func":
            raise TTIRSyntaxError(f"TTIR line {t.line}: expected 'tt.func', found '{t.text}'")
        public = True
        while self.peek().kind == "id":
            public = self.next().text == "public"
        name = self.next().text.lstrip("@").strip('"')
        self.expect("(")
        self.scopes = [{}]
        args, arg_attrs = [], []
        while self.peek().text != ")":
            vname = self.next().text
            self.expect(":")
            ty = self.type_()
            a = self.attr_dict() if self.peek().text == "{" else {}
            if self.peek().kind == "loc":
                self.next()
            args.append(self.define(vname, ty))
            arg_attrs.append(a)
            if self.peek().text == ",":
                self.next()
        self.expect(")")
        results: list[Type] = []
        if self.peek().text == "->":
            self.next()
            results = self.type_list()
        attrs = {}
        if self.peek().text == "attributes":
            self.next()
            attrs = self.attr_dict()
        self.expect("{")
        body = self.region(entry_args=args)
        loc = self.loc() if self.peek().kind == "loc" else None
        return Func(name, args, results, body, public, attrs, arg_attrs, loc)

    # ------------------------------------------------------------------------ regions
    def region(self, entry_args: list[Value] | None = None) -> Region:
        """Parse after '{' through the matching '}'."""
        self.enter("regions")
        self.scopes.append({v.name: v for v in entry_args or []})
        blocks: list[Block] = []
        block = Block(args=list(entry_args or []))
        while True:
            self.skip_nl()
            t = self.peek()
            if t.text == "}":
                self.next()
                break
            if t.kind == "block":
                label = self.next().text
                args = []
                if self.peek().text == "(":
                    self.next()
                    while self.peek().text != ")":
                        vname = self.next().text
                        self.expect(":")
                        ty = self.type_()
                        if self.peek().kind == "loc":
                            self.next()
                        args.append(self.define(vname, ty))
                        if self.peek().text == ",":
                            self.next()
                    self.next()
                self.expect(":")
                if block.ops or block.args:
                    blocks.append(block)
                block = Block(args=args, label=label)
                continue
            if t.kind == "eof":
                raise TTIRSyntaxError("TTIR: unexpected end of text inside a region")
            block.ops.append(self.op())
        blocks.append(block)
        self.scopes.pop()
        self.leave()
        return Region(blocks)

    # ------------------------------------------------------------------------------- ops
    def op(self) -> Op:
        line = self.peek().line
        result_names: list[str] = []
        if self.peek().kind == "value":
            while True:
                tok = self.next().text
                m = _RESULTS.match(tok)
                if m is None or (m.group(2) and m.group(3)):
                    raise TTIRSyntaxError(f"TTIR line {line}: malformed result name {tok[:40]!r}")
                if m.group(2):
                    count = m.group(2)
                    if len(count) > 6 or int(count) + len(result_names) > MAX_RESULTS:
                        raise TTIRSyntaxError(f"TTIR line {line}: {tok[:40]} declares more than "
                                              f"{MAX_RESULTS} results")
                    result_names += [f"{m.group(1)}#{k}" for k in range(int(count))]
                else:
                    result_names.append(tok)
                if len(result_names) > MAX_RESULTS:
                    raise TTIRSyntaxError(f"TTIR line {line}: more than {MAX_RESULTS} results")
                if self.peek().text != ",":
                    break
                self.next()
            self.expect("=")
        head = self.next()
        if head.kind == "str":
            op = self.generic_op(head.text.strip('"'), line)
        else:
            op = self.custom_op(head.text, line)
        types = op.attrs.pop("__result_types")
        if len(types) < len(result_names):
            types = list(types) + [types[-1] if types else ScalarType("none")] * (len(result_names) - len(types))
        op.results = [self.define(n, types[k]) for k, n in enumerate(result_names)]
        return op

    def generic_op(self, name: str, line: int) -> Op:
        self.expect("(")
        operands = []
        while self.peek().text != ")":
            operands.append(self.lookup(self.next().text, line))
            if self.peek().text == ",":
                self.next()
        self.next()
        attrs: dict = {}
        if self.peek().text == "<" and self.peek(1).text == "{":
            self.next()
            attrs.update(self.attr_dict())
            self.expect(">")
        regions = []
        if self.peek().text == "(" and self.peek(1).text == "{":
            self.next()
            while True:
                self.expect("{")
                regions.append(self.region())
                if self.peek().text == ",":
                    self.next()
                    continue
                break
            self.expect(")")
        if self.peek().text == "{":
            attrs.update(self.attr_dict())
        self.expect(":")
        ftype = self.type_()
        results = list(ftype.results) if isinstance(ftype, FunctionType) else [ftype]
        attrs["__result_types"] = results
        loc = self.loc() if self.peek().kind == "loc" else None
        return Op(name, operands, [], attrs, regions, loc)

    def custom_op(self, name: str, line: int) -> Op:
        toks: list[Token] = []
        regions: list[Region] = []
        attrs: dict = {}
        depth = 0
        loc = None
        while True:
            t = self.peek()
            if t.kind == "eof":
                raise TTIRSyntaxError(f"TTIR line {line}: unexpected end of text in {name}")
            if t.kind == "loc" and depth == 0:
                loc = self.loc()
                break
            if t.kind == "nl" and depth == 0:
                break
            if t.text == "{" and self.peek(1).kind == "nl":
                self.next()
                regions.append(self.region(self._entry_args(name, toks, len(regions))))
                continue
            if t.text == "{" and depth == 0:
                attrs.update(self.attr_dict())
                continue
            if t.text in "([":
                depth += 1
            elif t.text in ")]":
                depth -= 1
            toks.append(self.next())
        op = Op(name, [], [], attrs, regions, loc)
        self._interpret_custom(op, toks, line)
        return op

    def _entry_args(self, name: str, toks: list[Token], index: int) -> list[Value]:
        """Block arguments that a custom form declares before its region (scf.for, scf.while)."""
        if name == "scf.for" and index == 0 and toks:
            sig = self._signature(toks)
            iv_type = sig[1][0] if sig[1] else ScalarType("index")
            names = [toks[0].text] + [toks[k].text for k in range(len(toks) - 1)
                                      if toks[k + 1].text == "=" and toks[k].kind == "value"][1:]
            carried = sig[2]
            return [Value(names[0], iv_type)] + [Value(n, ty) for n, ty in zip(names[1:], carried)]
        if name == "scf.while" and index == 0:
            names = [toks[k].text for k in range(len(toks) - 1)
                     if toks[k + 1].text == "=" and toks[k].kind == "value"]
            sig = self._signature(toks)
            return [Value(n, ty) for n, ty in zip(names, sig[1])]
        return []

    def _signature(self, toks: list[Token]) -> tuple[int, list[Type], list[Type]]:
        """(index of the top-level ':', types before '->', types after '->') of a custom form."""
        depth, colon = 0, -1
        for k, t in enumerate(toks):
            if t.text in "([":
                depth += 1
            elif t.text in ")]":
                depth -= 1
            elif t.text == ":" and depth == 0 and colon < 0:
                colon = k
        arrow_types: list[Type] = []
        if colon < 0:  # scf.for / scf.if declare result types with '->' before any ':'
            for k, t in enumerate(toks):
                if t.text == "->":
                    arrow_types = _types_of(toks[k + 1:])
                    break
            return colon, [], arrow_types
        sig = toks[colon + 1:]
        pre = toks[:colon]
        for k, t in enumerate(pre):
            if t.text == "->":  # scf.for: `-> (types) : iv_type`
                arrow_types = _types_of(pre[k + 1:])
        ins, outs = sig, []
        for k, t in enumerate(sig):
            if t.text in ("->", "to"):
                ins, outs = sig[:k], sig[k + 1:]
                break
        return colon, _types_of(ins), _types_of(outs) or arrow_types

    def _interpret_custom(self, op: Op, toks: list[Token], line: int) -> None:
        if op.name == "tt.print":  # `tt.print "prefix" {attrs} : %a, %b : type, type`
            self._print_op(op, toks, line)
            return
        colon, ins, outs = self._signature(toks)
        head = toks[:colon] if colon >= 0 else toks
        keywords: list[str] = []
        k = 0
        while k < len(head):
            t = head[k]
            if t.kind == "value":
                defines = k + 1 < len(head) and head[k + 1].text == "="
                if not defines and not (op.name == "scf.for" and k == 0):
                    op.operands.append(self.lookup(t.text, line))
            elif t.kind == "sym":
                op.attrs["callee"] = SymbolRef(t.text.lstrip("@").strip('"'))
            elif t.kind == "block":
                op.successors.append(t.text)
            elif t.kind == "id" and k + 2 < len(head) and head[k + 1].text == "=" and head[k + 2].kind != "value":
                op.attrs[t.text] = _literal(head[k + 2], None)
                k += 2
            elif t.kind == "id" and t.text not in _STRUCTURAL:
                keywords.append(t.text)
            elif t.kind in ("num", "dense", "array") or t.text in ("true", "false"):
                op.attrs.setdefault("__literals", []).append(t)
            k += 1
        if keywords:
            op.attrs["keywords"] = keywords
        op.attrs["__result_types"] = self._result_types(op, ins, outs, keywords)
        if op.name == "tt.make_tensor_descriptor" and colon >= 0:  # 3.8: `: <f32>, <8x16xf32>`
            sig = [t.text for t in toks[colon + 1:]]
            last = "".join(sig[len(sig) - sig[::-1].index(","):] if "," in sig else sig).strip()
            inner = last[1:-1] if last.startswith("<") and last.endswith(">") else last
            block = parse_type(inner if inner.startswith("tensor<") else f"tensor<{inner}>")
            if isinstance(block, TensorType):
                op.attrs["__result_types"] = [TensorDescType(block)]
        self._normalise(op, keywords, ins)
        if op.name == "tt.dot_scaled":
            self._dot_scaled_order(op, head)

    @staticmethod
    def _dot_scaled_order(op: Op, head: list[Token]) -> None:
        """`tt.dot_scaled %a scale %as, %b scale %bs, %c`: operands as the op defines them,
        (a, b, c, a_scale?, b_scale?), and which scales are present."""
        groups: list[list[int]] = []
        k, after_scale = 0, False
        for t in head:
            if t.kind == "value":
                if after_scale and groups:
                    groups[-1].append(k)
                else:
                    groups.append([k])
                k += 1
                after_scale = False
            elif t.text == "scale":
                after_scale = True
        if len(groups) != 3 or k != len(op.operands):
            return
        vals = op.operands
        (a, *a_s), (b, *b_s), (c, *_) = ([vals[i] for i in g] for g in groups)
        op.operands = [a, b, c] + a_s + b_s
        op.attrs["has_a_scale"], op.attrs["has_b_scale"] = bool(a_s), bool(b_s)

    def _print_op(self, op: Op, toks: list[Token], line: int) -> None:
        colons = [k for k, t in enumerate(toks) if t.text == ":"]
        for t in toks[:colons[0] if colons else len(toks)]:
            if t.kind == "str":
                op.attrs["prefix"] = _literal(t, None)
        if colons:
            end = colons[1] if len(colons) > 1 else len(toks)
            op.operands.extend(self.lookup(t.text, line) for t in toks[colons[0] + 1:end] if t.kind == "value")
        op.attrs["__result_types"] = []

    def _result_types(self, op: Op, ins: list[Type], outs: list[Type], keywords: list[str]) -> list[Type]:
        n = op.name
        if not ins and n in ("arith.cmpi", "arith.cmpf", "tt.load", "tt.addptr", "tt.advance",
                             "tt.make_tensor_descriptor"):
            raise self.error(f"{n} without its ': type' signature")
        if n in ("arith.cmpi", "arith.cmpf"):
            return [_like(ins[0], ScalarType("i1"))]
        if n == "tt.load":
            return [_loaded(ins[0])]
        if n == "arith.constant" and not ins:
            return [ScalarType("i1")]
        if n in ("tt.addptr", "tt.advance"):
            return [ins[0]]
        if n == "tt.make_tensor_descriptor":
            return [TensorDescType(ins[-1].pointee if isinstance(ins[-1], PointerType) else ins[-1])]
        if outs:
            return outs
        return [ins[-1]] if ins else []

    def _normalise(self, op: Op, keywords: list[str], ins: list[Type]) -> None:
        n, lits = op.name, op.attrs.pop("__literals", [])
        if n == "arith.constant":
            rtype = op.attrs["__result_types"][0]
            tok = lits[0] if lits else Token("id", keywords[0] if keywords else "0", 0)
            op.attrs["value"] = _literal(tok, rtype)
        elif n in ("arith.cmpi", "arith.cmpf") and keywords:
            op.attrs["predicate"] = keywords[0]
        elif n in ("tt.get_program_id", "tt.get_num_programs") and keywords:
            if keywords[0] not in _AXES:
                raise self.error(f"{n}: axis '{keywords[0][:20]}' is not x, y or z")
            op.attrs["axis"] = _AXES[keywords[0]]
        elif n == "tt.atomic_rmw" and len(keywords) >= 3:
            op.attrs.update(atomic_rmw_op=keywords[0], sem=keywords[1], scope=keywords[2])
        elif n == "tt.atomic_cas" and len(keywords) >= 2:
            op.attrs.update(sem=keywords[0], scope=keywords[1])
        elif n == "tt.reshape":
            op.attrs["allow_reorder"] = "allow_reorder" in keywords
            op.attrs["efficient_layout"] = "efficient_layout" in keywords

    # --------------------------------------------------------------------- types, attrs
    def type_(self) -> Type:
        self.enter("types")
        try:
            return self._type()
        finally:
            self.leave()

    def _type(self) -> Type:
        t = self.next()
        if t.kind == "type":
            return parse_type(t.text)
        if t.text == "(":  # function type
            ins = []
            while self.peek().text != ")":
                ins.append(self.type_())
                if self.peek().text == ",":
                    self.next()
            self.next()
            self.expect("->")
            outs = self.type_list()
            return FunctionType(tuple(ins), tuple(outs))
        if t.text == "<":  # `<tensor<...>>` shorthand of a pointer to a tensor
            inner = self.type_()
            self.expect(">")
            return PointerType(inner)
        return parse_type(t.text)

    def type_list(self) -> list[Type]:
        if self.peek().text == "(":
            self.next()
            out = []
            while self.peek().text != ")":
                out.append(self.type_())
                if self.peek().text == ",":
                    self.next()
            self.next()
            return out
        return [self.type_()]

    def attr_dict(self) -> dict:
        self.expect("{")
        out: dict = {}
        while self.peek().text != "}":
            self.skip_nl()
            key = self.next().text.strip('"')
            if self.peek().text != "=":
                out[key] = True  # unit attribute
            else:
                self.next()
                out[key] = self.attr_value()
            if self.peek().text == ",":
                self.next()
            self.skip_nl()
        self.next()
        return out

    def attr_value(self):
        if self.peek().text == "[":
            self.next()
            self.enter("attribute lists")
            items = []
            while self.peek().text != "]":
                items.append(self.attr_value())
                if self.peek().text == ",":
                    self.next()
            self.next()
            self.leave()
            return items
        val = self.next()
        ty = None
        if self.peek().text == ":" and self.peek(1).kind in ("id", "type"):
            self.next()
            ty = self.type_()
        return _literal(val, ty)

    # ---------------------------------------------------------------------- locations
    def loc(self) -> Loc | None:
        return self.resolve_loc(self.next().text[4:-1])

    def resolve_loc(self, inner: str) -> Loc | None:
        inner = inner.strip()
        if inner in self._loc_cache:
            return self._loc_cache[inner]
        self._loc_cache[inner] = None  # guards against cycles
        self.enter("locations")
        loc = self._resolve(inner)
        self.leave()
        self._loc_cache[inner] = loc
        return loc

    def _resolve(self, inner: str) -> Loc | None:
        if inner.startswith("#"):
            target = self.loc_defs.get(inner)
            return self.resolve_loc(target[4:-1]) if target else None
        m = re.match(r'^"([^"\\]*(?:\\.[^"\\]*)*)":(\d{1,18}):(\d{1,18})(?!\d)', inner)
        if m:
            return Loc(m.group(1), int(m.group(2)), int(m.group(3)))
        m = re.match(r'^"[^"\\]*(?:\\.[^"\\]*)*"\((.*)\)$', inner, re.S)
        if m:
            return self.resolve_loc(m.group(1))
        if inner.startswith("callsite(") and inner.endswith(")"):
            callee, caller = _split_at(inner[len("callsite("):-1])
            a, b = self.resolve_loc(callee), self.resolve_loc(caller)
            if a is None or _is_library(a.file, self._triton_dir):
                return b or a
            return a
        if inner.startswith("fused"):
            for part in re.findall(r'#loc\d*|"[^"]*":\d+:\d+', inner):
                loc = self.resolve_loc(part)
                if loc is not None:
                    return loc
        return None


def _split_at(text: str) -> tuple[str, str]:
    depth = 0
    for k in range(len(text)):
        ch = text[k]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and text.startswith(" at ", k):
            return text[:k], text[k + 4:]
    return text, ""


def _types_of(toks: list[Token]) -> list[Type]:
    out: list[Type] = []
    k = 0
    while k < len(toks):
        t = toks[k]
        if t.kind == "type" or (t.kind == "id" and _TYPE_WORDS.match(t.text)):
            out.append(parse_type(t.text))
        elif t.text == "<" and k + 2 < len(toks) and toks[k + 2].text == ">":
            out.append(PointerType(parse_type(toks[k + 1].text)))
            k += 2
        elif t.text == "->":
            break
        k += 1
    return out


def _like(t: Type, elem: Type) -> Type:
    return TensorType(t.dims, elem) if isinstance(t, TensorType) else elem


def _loaded(ptr: Type) -> Type:
    if isinstance(ptr, TensorType) and isinstance(ptr.elem, PointerType):
        return TensorType(ptr.dims, ptr.elem.pointee)
    if isinstance(ptr, PointerType):
        return ptr.pointee
    return ptr


def _literal(tok: Token, ty: Type | None):
    if tok.kind == "dense":
        return parse_dense(tok.text, ty)
    if tok.kind == "array":
        body = tok.text[tok.text.index("<") + 1:-1]
        if ":" in body:
            body = body.split(":", 1)[1]
        elif tok.text.startswith("array<"):
            return []  # `array<i32>`: an empty array (tt.print's isSigned when it prints no value)
        return [parse_number(x.strip()) for x in body.split(",") if x.strip()]
    if tok.kind == "num" or tok.text in ("true", "false"):
        return parse_number(tok.text, ty)
    if tok.kind == "str":
        return tok.text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if tok.kind == "sym":
        return SymbolRef(tok.text.lstrip("@").strip('"'))
    return tok.text


def _is_library(path: str, triton_dir: str) -> bool:
    """Triton's own language files (tl.sum, tl.rand ...): report their caller's line instead."""
    return path.startswith((triton_dir, "<")) or re.search(r"[/\\]triton[/\\]language[/\\]", path) is not None


def _triton_dir() -> str:
    try:
        import triton
        return os.path.dirname(triton.__file__)
    except Exception:  # pragma: no cover - triton is a hard dependency
        return "\0"
