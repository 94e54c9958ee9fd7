#!/usr/bin/env python3
"""Corpus generator: printed torch FX graphs (GraphModule.print_readable() text,
AOTAutograd / make_fx shapes) of Megatron-LM GPT under tensor parallelism with
sequence parallelism, at tiny sizes, with bug twins.

Plain Python 3, no torch: every shape is computed here (tools/corpus/atenops.py)
and the output is deterministic.

    python3 tools/corpus/megatron_fx.py [--out test/fixtures/megatron-fx] [CONFIG ...]

writes test/fixtures/megatron-fx/<config>/{logical*.py, rank*.py, relations.json}.
See test/fixtures/megatron-fx/README.md for what each config is.
"""

import argparse
import json
import re
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fxir import INT_MAX, Graph, contiguous_strides, partition, render  # noqa: E402
from atenops import B8, F32, I32, I64, Ops  # noqa: E402

from mfx_common import (HIDDEN, HEADS, SEQ, MBS, VOCAB, FFN, HEAD_DIM, EPS, P_DROP, DROP_SCALE, ATTN_ALPHA, MASK_FILL, TP_GROUP, TP1_GROUP, EXPERTS, TP_EP_GROUP, MEG, TORCH, L, loc, HEADER)  # noqa: E402,F401
from mfx_gpt import (Gpt, finalize_allreduce)  # noqa: E402,F401
from mfx_switch import (Switch)  # noqa: E402,F401

def gpt_inputs_relations(prog, T, fwbw):
    P = prog.P
    rel = {}
    rel["primals_1"] = {"role": "param", "placements": ["S(0)"]}
    for d in prog.lp:
        for name, pl in [("ln1_w", "R"), ("ln1_b", "R"), ("qkv_w", "S(0)"), ("qkv_b", "S(0)"), ("proj_w", "S(1)"),
                         ("proj_b", "R"), ("ln2_w", "R"), ("ln2_b", "R"), ("fc1_w", "S(0)"), ("fc1_b", "S(0)"),
                         ("fc2_w", "S(1)"), ("fc2_b", "R")]:
            rel[d[name].name] = {"role": "param", "placements": [pl]}
    for name, pl in [("lnf_w", "R"), ("lnf_b", "R"), ("out_w", "S(0)"), ("pos", "R")]:
        rel[P[name].name] = {"role": "param", "placements": [pl]}
    rel[P["tokens"].name] = {"values": {"range": [0, VOCAB]}, "placements": ["R"]}
    rel[P["amask"].name] = {"values": {"range": [0, 2]}, "placements": ["R"]}
    rel[P["posids"].name] = {"values": {"range": [0, SEQ]}, "placements": ["R"]}
    rel[P["labels"].name] = {"values": {"range": [0, VOCAB]}, "placements": ["R"]}
    rel[P["lmask"].name] = {"placements": ["R"]}
    if fwbw:
        rel["tangents_1"] = {"placements": ["R"]}
    return rel


GPT_GRAD_NAMES = ["ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w", "proj_b", "ln2_w", "ln2_b",
                  "fc1_w", "fc1_b", "fc2_w", "fc2_b"]
GPT_GRAD_PL = {"word": "S(0)", "ln1_w": "R", "ln1_b": "R", "qkv_w": "S(0)", "qkv_b": "S(0)", "proj_w": "S(1)",
               "proj_b": "R", "ln2_w": "R", "ln2_b": "R", "fc1_w": "S(0)", "fc1_b": "S(0)", "fc2_w": "S(1)",
               "fc2_b": "R", "lnf_w": "R", "lnf_b": "R", "out_w": "S(0)", "pos": "R"}
MEG_NAME = {"ln1_w": "input_layernorm.weight", "ln1_b": "input_layernorm.bias",
            "qkv_w": "self_attention.linear_qkv.weight", "qkv_b": "self_attention.linear_qkv.bias",
            "proj_w": "self_attention.linear_proj.weight", "proj_b": "self_attention.linear_proj.bias",
            "ln2_w": "pre_mlp_layernorm.weight", "ln2_b": "pre_mlp_layernorm.bias",
            "fc1_w": "mlp.linear_fc1.weight", "fc1_b": "mlp.linear_fc1.bias",
            "fc2_w": "mlp.linear_fc2.weight", "fc2_b": "mlp.linear_fc2.bias"}


def gpt_grad_list(prog):
    """[(output name, primal node, placement)] for every parameter gradient."""
    P = prog.P
    out = [("grad.embedding.word_embeddings.weight", P["word"], GPT_GRAD_PL["word"])]
    for i, d in enumerate(prog.lp):
        for k in GPT_GRAD_NAMES:
            out.append(("grad.decoder.layers.%d.%s" % (i, MEG_NAME[k]), d[k], GPT_GRAD_PL[k]))
    out += [("grad.decoder.final_layernorm.weight", P["lnf_w"], "R"),
            ("grad.decoder.final_layernorm.bias", P["lnf_b"], "R"),
            ("grad.output_layer.weight", P["out_w"], "S(0)"),
            ("grad.embedding.position_embeddings.weight", P["pos"], "R")]
    return out


def relations(T, inputs, outputs, constants, groups):
    return {
        "format": "planproof-relations/v1",
        "mesh": {"axes": [{"name": "tp", "size": T}]},
        "constants": constants,
        "opMap": "apex",
        "inputs": inputs,
        "outputs": outputs,
        "dropout": "auto",
        "groups": {gname: {"axes": ["tp"]} for gname in groups},
    }


def out_entry(name, lnode, rnode, pl):
    e = {"name": name, "node": rnode.name, "placements": [pl]}
    if lnode.name != rnode.name:
        e["logicalNode"] = lnode.name
    return e


def emit_program(prog, mode, fw_outputs, extra_fw_outputs=()):
    """-> list of file texts for one program: fw-only / fwbw (2 files) / joint."""
    g = prog.g
    if mode == "joint":
        ph = [n for n in g.nodes if n.kind == "placeholder"]
        body = [n for n in g.nodes if n.kind != "placeholder"]
        outs = list(fw_outputs) + list(prog.bw_outputs)
        return [render(HEADER, "joint_helper", ph, body, outs, joint=True)]
    bw_outs = [] if mode == "fw" else prog.bw_outputs
    if mode == "fw":
        # the forward graph of the AOT partition of the full training step
        fw_ph, fw_body, saved, bw_ph, bw_body = partition(g, fw_outputs + list(extra_fw_outputs),
                                                          prog.fw_only_bw_outputs)
        return [render(HEADER, "GraphModule", fw_ph, fw_body, list(fw_outputs) + list(extra_fw_outputs) + saved)]
    fw_ph, fw_body, saved, bw_ph, bw_body = partition(g, fw_outputs, bw_outs)
    return [render(HEADER, "GraphModule", fw_ph, fw_body, list(fw_outputs) + saved),
            render(HEADER, "GraphModule", bw_ph, bw_body, bw_outs)]


def build_gpt(T, r, layers, style, mode, bug=None):
    if mode == "fw":
        # build the training step too (to know what the forward saves), print the forward only
        p = Gpt(T, r, layers, style, fw_only=True)
        q = Gpt(T, r, layers, style, fw_only=False)
        # map q's backward needs onto p: same structure, p has one more node (zeros) first
        p.fw_only_bw_outputs = _gpt_bw_saved_in(p, q)
        return p
    return Gpt(T, r, layers, style, fw_only=False, bug=bug)


def _gpt_bw_saved_in(p, q):
    """The forward values (of p, a forward-only build) the backward of q (a
    training build of the same program) reads: returned as pseudo outputs so
    that partition() puts them in p's saved list."""
    qfw = [n for n in q.g.nodes if n.section == "fw"]
    pfw = [n for n in p.g.nodes if n.section == "fw" and n is not getattr(p, "zeros", None)]
    assert len(qfw) == len(pfw)
    qmap = {id(a): b for a, b in zip(qfw, pfw)}
    _, _, saved, _, _ = partition(q.g, [q.loss], q.bw_outputs)
    return [qmap[id(n)] for n in saved if id(n) in qmap]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def gen_gpt_fw(out, name, T, layers):
    d = os.path.join(out, name)
    progs = [("logical", build_gpt(1, 0, layers, "v1", "fw"))] + \
        [("rank%d" % r, build_gpt(T, r, layers, "v1", "fw")) for r in range(T)]
    for fname, p in progs:
        (txt,) = emit_program(p, "fw", [p.loss, p.loss], [p.zeros])
        write(os.path.join(d, fname + ".py"), txt)
    lg, rk = progs[0][1], progs[1][1]
    rel = relations(T, gpt_inputs_relations(rk, T, False),
                    [out_entry("loss", lg.loss, rk.loss, "R")],
                    {"_tensor_constant0": 0, "_tensor_constant1": 0.0, "_tensor_constant2": 0,
                     "_tensor_constant3": 0.0}, [TP_GROUP])
    write(os.path.join(d, "relations.json"), json.dumps(rel, indent=1) + "\n")


def gen_gpt_train(out, name, T, layers, mode, bug=None):
    d = os.path.join(out, name)
    progs = [("logical", build_gpt(1, 0, layers, "v2", mode))] + \
        [("rank%d" % r, build_gpt(T, r, layers, "v2", mode, bug)) for r in range(T)]
    for fname, p in progs:
        txts = emit_program(p, mode, [p.loss])
        if len(txts) == 1:
            write(os.path.join(d, fname + ".py"), txts[0])
        else:
            for i, t in enumerate(txts):
                write(os.path.join(d, "%s.%d.py" % (fname, i)), t)
    lg, rk = progs[0][1], progs[1][1]
    outs = [out_entry("loss", lg.loss, rk.loss, "R")]
    lgl, rgl = gpt_grad_list(lg), gpt_grad_list(rk)
    for (nm, lp, pl), (_, rp, _) in zip(lgl, rgl):
        outs.append(out_entry(nm, lg.grads[("p", id(lp))], rk.grads[("p", id(rp))], pl))
    rel = relations(T, gpt_inputs_relations(rk, T, True), outs,
                    {"_tensor_constant0": 0, "_tensor_constant1": 0.0, "_tensor_constant2": 0,
                     "_tensor_constant3": 0.0}, [TP_GROUP])
    write(os.path.join(d, "relations.json"), json.dumps(rel, indent=1) + "\n")


def gen_switch(out, name, T, bug=None):
    d = os.path.join(out, name)
    progs = [("logical", Switch(1, 0))] + [("rank%d" % r, Switch(T, r, bug)) for r in range(T)]
    for fname, p in progs:
        (txt,) = emit_program(p, "joint", [p.out])
        write(os.path.join(d, fname + ".py"), txt)
    lg, rk = progs[0][1], progs[1][1]
    inputs = {lg.P["ln_w"].name: {"role": "param", "placements": ["R"]},
              lg.P["ln_b"].name: {"role": "param", "placements": ["R"]},
              lg.P["router"].name: {"role": "param", "placements": ["R"]}}
    for e in rk.experts:
        inputs[e["fc1"].name] = {"role": "param", "placements": ["S(0)"]}
        inputs[e["fc2"].name] = {"role": "param", "placements": ["S(1)"]}
    inputs[rk.P["hidden"].name] = {"placements": ["S(0)"]}
    inputs["tangents_1"] = {"placements": ["S(0)"]}
    outs = [out_entry("output", lg.out, rk.out, "S(0)")]
    names = [("grad.post_attention_norm.weight", "R"), ("grad.post_attention_norm.bias", "R"),
             ("grad.mlp.router.weight", "R")]
    for i in range(EXPERTS):
        names += [("grad.mlp.local_experts.%d.dense_h_to_4h.weight" % i, "S(0)"),
                  ("grad.mlp.local_experts.%d.dense_4h_to_h.weight" % i, "S(1)")]
    names += [("grad.hidden_states", "S(0)")]
    for (nm, pl), ln, rn in zip(names, lg.bw_outputs, rk.bw_outputs):
        outs.append(out_entry(nm, ln, rn, pl))
    rel = relations(T, inputs, outs, {}, [TP_EP_GROUP, TP_GROUP])
    del rel["constants"]
    write(os.path.join(d, "relations.json"), json.dumps(rel, indent=1) + "\n")


CONFIGS = {
    "gpt_tp2_l1": lambda out: gen_gpt_fw(out, "gpt_tp2_l1", 2, 1),
    "gpt_tp2_l2": lambda out: gen_gpt_fw(out, "gpt_tp2_l2", 2, 2),
    "gpt_tp4_l1": lambda out: gen_gpt_fw(out, "gpt_tp4_l1", 4, 1),
    "gpt_tp4_l2": lambda out: gen_gpt_fw(out, "gpt_tp4_l2", 4, 2),
    "gpt_tp2_l1_fwbw": lambda out: gen_gpt_train(out, "gpt_tp2_l1_fwbw", 2, 1, "fwbw"),
    "gpt_tp2_l1_fwbw.bug_sp_ln_grad": lambda out: gen_gpt_train(out, "gpt_tp2_l1_fwbw.bug_sp_ln_grad", 2, 1,
                                                                "fwbw", "sp_ln_grad"),
    "gpt_tp2_l1_fwbw.bug_vocab_input_grad": lambda out: gen_gpt_train(out, "gpt_tp2_l1_fwbw.bug_vocab_input_grad",
                                                                      2, 1, "fwbw", "vocab_input_grad"),
    "gpt_tp2_l1_joint": lambda out: gen_gpt_train(out, "gpt_tp2_l1_joint", 2, 1, "joint"),
    # issue 34's acceptance: tp 2 and 4 x 1 and 2 layers, forward + backward, each with both twins
    **{"gpt_tp%d_l%d_fwbw%s" % (T, n, b and ".bug_" + b): (lambda out, T=T, n=n, b=b: gen_gpt_train(
        out, "gpt_tp%d_l%d_fwbw%s" % (T, n, b and ".bug_" + b), T, n, "fwbw", b or None))
       for T, n in [(2, 2), (4, 1), (4, 2)] for b in ["", "sp_ln_grad", "vocab_input_grad"]},
    "switchmlp_tp2": lambda out: gen_switch(out, "switchmlp_tp2", 2),
    "switchmlp_tp2.bug_router_grad": lambda out: gen_switch(out, "switchmlp_tp2.bug_router_grad", 2, "router_grad"),
}


def config(name):
    """A config of CONFIGS, or gpt_tp<T>_l<L>[_fwbw|_joint][.bug_<bug>] at any T dividing the 4
    heads (and the vocabulary and sequence) and any layer count."""
    if name in CONFIGS:
        return CONFIGS[name]
    m = re.fullmatch(r"gpt_tp(\d+)_l(\d+)(?:_(fwbw|joint))?(?:\.bug_(sp_ln_grad|vocab_input_grad))?", name)
    if m is None:
        raise SystemExit("unknown config %r: one of %s, or gpt_tp<T>_l<L>[_fwbw|_joint][.bug_sp_ln_grad|.bug_vocab_input_grad]"
                         % (name, ", ".join(CONFIGS)))
    T, layers, mode, bug = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
    if T < 1 or HEADS % T or VOCAB % T or SEQ % T or layers < 1:
        raise SystemExit("%s: tp %d must divide the heads (%d), vocabulary (%d) and sequence (%d); layers >= 1"
                         % (name, T, HEADS, VOCAB, SEQ))
    if mode is None:
        if bug is not None:
            raise SystemExit("%s: bug twins are training configs (_fwbw or _joint)" % name)
        return lambda out: gen_gpt_fw(out, name, T, layers)
    return lambda out: gen_gpt_train(out, name, T, layers, mode, bug)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "test", "fixtures", "megatron-fx"))
    ap.add_argument("configs", nargs="*", help="default: all (%s); also gpt_tp<T>_l<L>[_fwbw|_joint][.bug_<bug>]" % ", ".join(CONFIGS))
    a = ap.parse_args()
    for c in a.configs or list(CONFIGS):
        config(c)(os.path.normpath(a.out))
        print("wrote", os.path.join(os.path.normpath(a.out), c))


if __name__ == "__main__":
    main()
