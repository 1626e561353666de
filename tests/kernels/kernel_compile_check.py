"""Compile every Triton kernel for a GPU target (sm_90) without a GPU; run as a script.

Used by test_compile.py in a fresh process with TRITON_INTERPRET=0: under the interpreter,
Triton patches its language module, which would make the compiler's front end misbehave.
Prints one line per kernel variant; exits non-zero on the first compile error.
"""
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hicache.kernels import _triton, attention, page_gather, transfer

TARGET = GPUTarget("cuda", 90, 32)


def compile_kernel(kernel, signature: dict, constexprs: dict) -> None:
    fn = _triton.runnable(kernel, "cuda")
    sig = {**signature, **{name: "constexpr" for name in constexprs}}
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs), target=TARGET)
    assert "ptx" in compiled.asm
    print(f"ok {fn.__name__} {constexprs}")


def transfer_variants():
    ptrs = {n: "*i64" for n in ("src_a", "dst_a", "src_b", "dst_b", "src_pages", "dst_pages")}
    ints = {n: "i32" for n in ("layers_a", "layers_b")}
    strides = {f"{s}{side}_{k}": "i64" for side in "ab" for s in "sd" for k in ("off", "c", "l", "p")}
    sig = {**ptrs, **ints, **strides, "src_t": "i32", "dst_t": "i32"}
    for src_contig, dst_contig, has_b in [(True, True, False), (True, False, True), (False, True, False)]:
        yield transfer._transfer_pages_kernel, sig, {
            "ROW": 96, "CHUNK": 96 * 16, "BLOCK": 2048, "SRC_CONTIG": src_contig, "DST_CONTIG": dst_contig,
            "HAS_B": has_b}


def gather_variants():
    for gather in (True, False):
        yield page_gather._page_rows_kernel, {"src": "*i32", "dst": "*i32", "ids": "*i64"}, {
            "CHUNK": 15 * 16, "BLOCK": 256, "GATHER": gather}


def attention_variants():
    sig = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "out": "*bf16", "page_table": "*i64", "tok_req": "*i64",
           "tok_pos": "*i64", "scale": "fp32"}
    sig.update({n: "i32" for n in ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh",
                                   "stride_ot", "stride_oh", "stride_pt")})
    yield attention._paged_attention_kernel, sig, {
        "GROUP": 2, "PAGE_SIZE": 16, "D": 12, "DV": 7, "BLOCK_D": 16, "BLOCK_DV": 8, "BLOCK": 32}


def main() -> int:
    for variants in (transfer_variants, gather_variants, attention_variants):
        for kernel, sig, constexprs in variants():
            compile_kernel(kernel, sig, constexprs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
