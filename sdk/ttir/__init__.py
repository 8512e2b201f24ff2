"""TTIR text -> a small Python IR (module, func, region, block, op, value, type, loc)."""
from .ir import (Block, DenseAttr, Func, FunctionType, Loc, Module, OpaqueType, Op, PointerType, Region,
                 ScalarType, SymbolRef, TensorDescType, TensorType, Type, Value)
from .lexer import TTIRSyntaxError
from .parser import parse

__all__ = ["Block", "DenseAttr", "Func", "FunctionType", "Loc", "Module", "OpaqueType", "Op", "PointerType",
           "Region", "ScalarType", "SymbolRef", "TensorDescType", "TensorType", "Type", "Value",
           "TTIRSyntaxError", "parse"]
