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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fxir import INT_MAX, Graph, contiguous_strides, partition, render  # noqa: E402
from atenops import B8, F32, I32, I64, Ops  # noqa: E402

# ------------------------------------------------------------------ sizes
HIDDEN, HEADS, SEQ, MBS, VOCAB, FFN = 16, 4, 8, 2, 32, 64
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-05
P_DROP = 0.1
DROP_SCALE = 1.0 / (1.0 - P_DROP)          # 1.1111111111111112
ATTN_ALPHA = 1.0 / (HEAD_DIM ** 0.5)       # 0.5 (1 / norm_factor)
MASK_FILL = -10000.0
TP_GROUP = "12"        # the tensor-parallel process group's name in the rank graphs
TP1_GROUP = "7"        # the (one-rank) tensor-parallel group of the tp 1 run
EXPERTS = 4
TP_EP_GROUP = "25"     # SwitchMLP's tensor+expert parallel group (expert parallel size 1)

# ------------------------------------------------------------------ source locations
MEG = "/workspace/Megatron-LM"
TORCH = "/usr/local/lib/python3.11/site-packages/torch"
L = {
    "zeros": (MEG + "/megatron/core/pipeline_parallel/schedules.py", 456, "forward_backward_no_pipelining",
              'total_num_tokens = torch.zeros([], dtype=torch.int, device="cuda")'),
    "tokens": (MEG + "/pretrain_gpt.py", 106, "forward_step", "tokens = data['tokens'].to(device)"),
    "amask": (MEG + "/pretrain_gpt.py", 107, "forward_step", "attention_mask = data['attention_mask'].to(device)"),
    "posids": (MEG + "/pretrain_gpt.py", 108, "forward_step", "position_ids = data['position_ids'].to(device)"),
    "labels": (MEG + "/pretrain_gpt.py", 109, "forward_step", "labels = data['labels'].to(device)"),
    "lmask": (MEG + "/pretrain_gpt.py", 110, "forward_step", "loss_mask = data['loss_mask'].to(device)"),
    "emb_mask": (MEG + "/megatron/core/tensor_parallel/layers.py", 252, "forward",
                 "input_mask = (input_ < self.vocab_start_index) | (input_ >= self.vocab_end_index)"),
    "emb_sub": (MEG + "/megatron/core/tensor_parallel/layers.py", 254, "forward",
                "masked_input = input_.clone() - self.vocab_start_index"),
    "emb_put": (MEG + "/megatron/core/tensor_parallel/layers.py", 255, "forward", "masked_input[input_mask] = 0"),
    "emb_index": (MEG + "/megatron/core/tensor_parallel/layers.py", 260, "forward",
                  "output_parallel = self.weight[masked_input]"),
    "emb_f": (MEG + "/megatron/core/tensor_parallel/layers.py", 263, "forward",
              "output_parallel = F.embedding(masked_input, self.weight)"),
    "emb_zero": (MEG + "/megatron/core/tensor_parallel/layers.py", 266, "forward",
                 "output_parallel[input_mask, :] = 0.0"),
    "reduce_from": (MEG + "/megatron/core/tensor_parallel/mappings.py", 484, "reduce_from_tensor_model_parallel_region",
                    "return _ReduceFromModelParallelRegion.apply(input_)"),
    "copy_to": (MEG + "/megatron/core/tensor_parallel/mappings.py", 479, "copy_to_tensor_model_parallel_region",
                "return _CopyToModelParallelRegion.apply(input_)"),
    "scatter_sp": (MEG + "/megatron/core/tensor_parallel/mappings.py", 499, "scatter_to_sequence_parallel_region",
                   "return _ScatterToSequenceParallelRegion.apply(input_)"),
    "gather_sp": (MEG + "/megatron/core/tensor_parallel/mappings.py", 509, "gather_from_sequence_parallel_region",
                  "return _GatherFromSequenceParallelRegion.apply("),
    "rs_sp": (MEG + "/megatron/core/tensor_parallel/mappings.py", 519, "reduce_scatter_to_sequence_parallel_region",
              "return _ReduceScatterToSequenceParallelRegion.apply("),
    "split_sp": (MEG + "/megatron/core/tensor_parallel/mappings.py", 72, "_split_along_first_dim",
                 "output = input_[dim_offset : dim_offset + local_dim_size].contiguous()"),
    "pos_emb": (MEG + "/megatron/core/models/common/embeddings/language_model_embedding.py", 111, "forward",
                "position_embeddings = self.position_embeddings(position_ids)"),
    "emb_add": (MEG + "/megatron/core/models/common/embeddings/language_model_embedding.py", 112, "forward",
                "embeddings = word_embeddings + position_embeddings"),
    "emb_t": (MEG + "/megatron/core/models/common/embeddings/language_model_embedding.py", 118, "forward",
              "embeddings = embeddings.transpose(0, 1).contiguous()"),
    "emb_clone": (MEG + "/megatron/core/models/common/embeddings/language_model_embedding.py", 140, "forward",
                  "embeddings = embeddings.clone()"),
    "emb_drop": (MEG + "/megatron/core/models/common/embeddings/language_model_embedding.py", 142, "forward",
                 "embeddings = self.embedding_dropout(embeddings)"),
    "emb_drop1": (MEG + "/megatron/core/models/common/embeddings/language_model_embedding.py", 147, "forward",
                  "embeddings = self.embedding_dropout(embeddings)"),
    "apex": (TORCH + "/_library/custom_ops.py", 506, "__call__", "return self._opoverload(*args, **kwargs)"),
    "linear": (MEG + "/megatron/core/tensor_parallel/layers.py", 697, "linear_with_grad_accumulation_and_async_allreduce",
               "return LinearWithGradAccumulationAndAsyncCommunication.apply(*args)"),
    "qkv_view": (MEG + "/megatron/core/transformer/attention.py", 630, "get_query_key_value_tensors",
                 "mixed_qkv = mixed_qkv.view(*new_tensor_shape)"),
    "qkv_split": (MEG + "/megatron/core/transformer/attention.py", 651, "get_query_key_value_tensors",
                  "(query, key, value) = torch.split(mixed_qkv, split_arg_list, dim=3)"),
    "q_reshape": (MEG + "/megatron/core/transformer/attention.py", 654, "get_query_key_value_tensors",
                  "query = query.reshape(query.size(0), query.size(1), -1, self.hidden_size_per_attention_head)"),
    "q_view": (MEG + "/megatron/core/transformer/dot_product_attention.py", 143, "forward",
               "query = query.reshape(output_size[2], output_size[0] * output_size[1], -1)"),
    "k_view": (MEG + "/megatron/core/transformer/dot_product_attention.py", 145, "forward",
               "key = key.view(output_size[3], output_size[0] * output_size[1], -1)"),
    "mm_buf": (MEG + "/megatron/core/transformer/dot_product_attention.py", 149, "forward",
               "matmul_input_buffer = torch.empty((output_size[0] * output_size[1], output_size[2], output_size[3]), dtype=query.dtype, device=query.device)"),
    "q_t": (MEG + "/megatron/core/transformer/dot_product_attention.py", 158, "forward",
            "query.transpose(0, 1),  # [b * np, sq, hn]"),
    "k_t": (MEG + "/megatron/core/transformer/dot_product_attention.py", 159, "forward",
            "key.transpose(0, 1).transpose(1, 2),  # [b * np, hn, sk]"),
    "baddbmm": (MEG + "/megatron/core/transformer/dot_product_attention.py", 156, "forward",
                "matmul_result = torch.baddbmm("),
    "scores_view": (MEG + "/megatron/core/transformer/dot_product_attention.py", 165, "forward",
                    "attention_scores = matmul_result.view(*output_size)"),
    "mask_fill": (MEG + "/megatron/core/transformer/utils.py", 36, "attention_mask_func",
                  "attention_scores.masked_fill_(attention_mask, -10000.0)"),
    "softmax": (TORCH + "/nn/modules/activation.py", 1554, "forward", "return F.softmax(input, self.dim, _stacklevel=5)"),
    "attn_drop": (MEG + "/megatron/core/transformer/dot_product_attention.py", 181, "forward",
                  "attention_probs = self.attention_dropout(attention_probs)"),
    "v_view": (MEG + "/megatron/core/transformer/dot_product_attention.py", 194, "forward",
               "value = value.view(value.size(0), output_size[0] * output_size[1], -1)"),
    "p_view": (MEG + "/megatron/core/transformer/dot_product_attention.py", 197, "forward",
               "attention_probs = attention_probs.view(output_size[0] * output_size[1], output_size[2], -1)"),
    "ctx_bmm": (MEG + "/megatron/core/transformer/dot_product_attention.py", 200, "forward",
                "context = torch.bmm(attention_probs, value.transpose(0, 1))"),
    "ctx_view": (MEG + "/megatron/core/transformer/dot_product_attention.py", 203, "forward",
                 "context = context.view(*output_size)"),
    "ctx_perm": (MEG + "/megatron/core/transformer/dot_product_attention.py", 206, "forward",
                 "context = context.permute(2, 0, 1, 3).contiguous()"),
    "ctx_view2": (MEG + "/megatron/core/transformer/dot_product_attention.py", 210, "forward",
                  "context = context.view(*new_context_shape)"),
    "bda_bias": (MEG + "/megatron/core/fusions/fused_bias_dropout.py", 31, "_bias_dropout_add_func", "x = x + bias"),
    "bda_drop": (MEG + "/megatron/core/fusions/fused_bias_dropout.py", 32, "_bias_dropout_add_func",
                 "out = torch.nn.functional.dropout(x, p=prob, training=training)"),
    "bda_res": (MEG + "/megatron/core/fusions/fused_bias_dropout.py", 33, "_bias_dropout_add_func", "out = residual + out"),
    "mlp_bias": (MEG + "/megatron/core/transformer/mlp.py", 116, "forward",
                 "intermediate_parallel = intermediate_parallel + bias_parallel"),
    "mlp_act": (MEG + "/megatron/core/transformer/mlp.py", 125, "forward",
                "intermediate_parallel = self.activation_func(intermediate_parallel)"),
    "labels_t": (MEG + "/megatron/core/models/common/language_module/language_module.py", 77, "compute_language_model_loss",
                 "labels = labels.transpose(0, 1).contiguous()"),
    "ce": (MEG + "/megatron/core/tensor_parallel/cross_entropy.py", 245, "vocab_parallel_cross_entropy",
           "return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target, label_smoothing)"),
    "loss_t": (MEG + "/megatron/core/models/common/language_module/language_module.py", 84, "compute_language_model_loss",
               "loss = loss.transpose(0, 1).contiguous()"),
    "lmask_view": (MEG + "/pretrain_gpt.py", 98, "loss_func", "loss_mask = loss_mask.view(-1).float()"),
    "loss": (MEG + "/pretrain_gpt.py", 99, "loss_func",
             "loss = torch.sum(losses.view(-1) * loss_mask) / loss_mask.sum()"),
    "mb_div": (MEG + "/megatron/core/pipeline_parallel/schedules.py", 295, "forward_step",
               "output_tensor /= num_microbatches"),
    "ln_flat": (MEG + "/megatron/core/distributed/finalize_model_grads.py", 118, "_allreduce_layernorm_grads",
                "coalesced = _flatten_dense_tensors(grads)"),
    "ln_ar": (MEG + "/megatron/core/distributed/finalize_model_grads.py", 119, "_allreduce_layernorm_grads",
              "torch.distributed.all_reduce(coalesced, group=parallel_state.get_tensor_model_parallel_group())"),
    "ln_unflat": (MEG + "/megatron/core/distributed/finalize_model_grads.py", 120, "_allreduce_layernorm_grads",
                  "for buf, synced in zip(grads, _unflatten_dense_tensors(coalesced, grads)):"),
    # legacy SwitchMLP (megatron/legacy/model/transformer.py)
    "sw_ln": (TORCH + "/_library/custom_ops.py", 506, "__call__", "return self._opoverload(*args, **kwargs)"),
    "sw_route": (MEG + "/megatron/legacy/model/transformer.py", 262, "forward",
                 "route = self.router(hidden_states).view(-1, args.num_experts)"),
    "sw_softmax": (MEG + "/megatron/legacy/model/transformer.py", 270, "forward",
                   "route = torch.softmax(route, dim=1)"),
    "sw_argmax": (MEG + "/megatron/legacy/model/transformer.py", 272, "forward",
                  "_, max_ind = torch.max(route.detach(), dim=1)"),
    "sw_maxprob": (MEG + "/megatron/legacy/model/transformer.py", 273, "forward",
                   "max_prob = route[torch.arange(route.size(0)), max_ind]"),
    "sw_unsq": (MEG + "/megatron/legacy/model/transformer.py", 278, "forward", "max_prob = torch.unsqueeze(max_prob, 1)"),
    "sw_hview": (MEG + "/megatron/legacy/model/transformer.py", 279, "forward",
                 "hidden_states = hidden_states.view(-1, hidden_states.size(2))"),
    "sw_gather_idx": (MEG + "/megatron/legacy/model/transformer.py", 249, "gather_indices",
                      "torch.distributed._all_gather_base(output, local_indices.contiguous(), group=self.tp_ep_group)"),
    "sw_zeros": (MEG + "/megatron/legacy/model/transformer.py", 292, "forward",
                 "output_total = torch.zeros_like(global_hidden_states)"),
    "sw_mask": (MEG + "/megatron/legacy/model/transformer.py", 298, "forward",
                "local_mask = (global_indices == local_expert_index).unsqueeze(1).to(global_hidden_states.dtype)"),
    "sw_expert_act": (MEG + "/megatron/legacy/model/transformer.py", 172, "forward",
                      "intermediate_parallel = self.activation_func(intermediate_parallel)"),
    "sw_accum": (MEG + "/megatron/legacy/model/transformer.py", 301, "forward",
                 "output_total = output_total + output * local_mask"),
    "sw_prob": (MEG + "/megatron/legacy/model/transformer.py", 318, "forward", "output_total = output_total*max_prob"),
    "sw_oview": (MEG + "/megatron/legacy/model/transformer.py", 319, "forward", "output_total = output_total.view(s, b, h)"),
    "sw_drop": (MEG + "/megatron/legacy/model/transformer.py", 1021, "forward",
                "out = torch.nn.functional.dropout(mlp_output, p=self.hidden_dropout, training=self.training)"),
    "sw_res": (MEG + "/megatron/legacy/model/transformer.py", 1022, "forward", "output = residual + out"),
}


def loc(key):
    return L[key]


HEADER = [
    "# Generated by tools/corpus/megatron_fx.py: do not edit (see test/fixtures/megatron-fx/README.md).",
    "import torch",
    "from torch import device",
    "",
    "b8: type",
    "i32: type",
    "i64: type",
    "bf16: type",
    "f32: type",
    "f64: type",
    "fx_pytree: type",
    "Sym: type",
    "",
    "",
]


# ================================================================== GPT

class Gpt:
    """Megatron-LM core GPTModel (local transformer spec, apex fused LayerNorm,
    untied output layer, learned absolute positions), one micro-batch, as one
    AOTAutograd joint graph of the forward + loss and (optionally) the backward
    and finalize_model_grads' tensor-parallel all-reduce.

    T = 1: the single-device run (Megatron turns sequence parallelism off).
    T > 1: rank `r` of tensor parallel size T with --sequence-parallel.
    style 'v1': the embedding lookup is `self.weight[masked_input]` (index.Tensor)
      and the padding rows are zeroed through a slice (slice + index_put + slice_scatter).
    style 'v2': F.embedding and a direct index_put; LayerNorm statistics go
      through detach() pairs (apex's custom-op autograd) and get_attr nodes are annotated.
    """

    def __init__(self, T, r, layers, style, fw_only, bug=None):
        self.T, self.r, self.layers, self.style, self.fw_only, self.bug = T, r, layers, style, fw_only, bug
        self.sp = T > 1
        self.g = Graph()
        self.o = Ops(self.g, device_index=r)
        self.group = TP_GROUP if T > 1 else TP1_GROUP
        self.build()

    def at(self, key):
        self.g.loc = loc(key)

    # ---------------------------------------------------------- forward
    def build(self):
        g, o, T = self.g, self.o, self.T
        h, s, b, V, f = HIDDEN, SEQ, MBS, VOCAB, FFN
        Vl, fl, hl, npl = V // T, f // T, h // T, HEADS // T
        self.sl = s // T if self.sp else s
        P = self.P = {}
        ph = g.placeholder
        P["word"] = ph("primals_1", F32, [Vl, h])
        self.lp = []
        k = 2
        for _ in range(self.layers):
            d = {}
            for name, shape in [("ln1_w", [h]), ("ln1_b", [h]), ("qkv_w", [3 * hl, h]), ("qkv_b", [3 * hl]),
                                ("proj_w", [h, hl]), ("proj_b", [h]), ("ln2_w", [h]), ("ln2_b", [h]),
                                ("fc1_w", [fl, h]), ("fc1_b", [fl]), ("fc2_w", [h, fl]), ("fc2_b", [h])]:
                d[name] = ph("primals_%d" % k, F32, shape)
                k += 1
            self.lp.append(d)
        for name, dt, shape in [("lnf_w", F32, [h]), ("lnf_b", F32, [h]), ("out_w", F32, [Vl, h]),
                                ("pos", F32, [s, h]), ("tokens", I64, [b, s]), ("amask", B8, [b, 1, s, s]),
                                ("posids", I64, [b, s]), ("labels", I64, [b, s]), ("lmask", F32, [b, s])]:
            P[name] = ph("primals_%d" % k, dt, shape)
            k += 1
        self.primals = [P["word"]] + [n for d in self.lp for n in d.values()] + \
            [P[x] for x in ["lnf_w", "lnf_b", "out_w", "pos", "tokens", "amask", "posids", "labels", "lmask"]]
        if not self.fw_only:
            self.tangent = g.placeholder("tangents_1", F32, [], section="bw")

        if self.fw_only:
            self.at("zeros")
            self.zeros = o.zeros([], I32, device=None)
        self.at("tokens")
        tok = o.to_copy(P["tokens"], I64)
        self.at("amask")
        self.am = o.to_copy(P["amask"], B8)
        self.at("posids")
        self.pid = o.to_copy(P["posids"], I64)
        self.at("labels")
        lab = o.to_copy(P["labels"], I64)
        self.at("lmask")
        lm = o.to_copy(P["lmask"], F32)
        self.tok = tok

        x = self.embedding(tok)
        for d in self.lp:
            x = self.layer(x, d)
        self.at("apex")
        lnf, mean, inv = o.fused_ln_fwd(x, P["lnf_w"], P["lnf_b"], h, EPS)
        self.lnf = dict(x=x, out=lnf, mean=mean, inv=inv)
        self.ln_detach(self.lnf)
        logits = self.column_linear(lnf, P["out_w"], None, self.lnf)
        self.at("labels_t")
        lt = o.transpose(lab, 0, 1)
        labc = o.clone(lt, contiguous=True)
        losses = self.cross_entropy(logits, labc)
        self.at("loss_t")
        tr = o.transpose(losses, 0, 1)
        lcl = o.clone(tr, contiguous=True)
        self.at("lmask_view")
        lmv = o.view(lm, [-1])
        self.at("loss")
        lv = o.view(lcl, [-1])
        mul = o.mul(lv, lmv)
        s2 = o.sum_all(mul)
        s3 = o.sum_all(lmv)
        d1 = o.div(s2, s3)
        self.at("mb_div")
        self.loss = o.div(d1, 1)
        self.loss_parts = dict(lmv=lmv, s3=s3)
        if not self.fw_only:
            g.section = "bw"
            self.backward()

    def ln_detach(self, st):
        if self.style == "v2":
            o = self.o
            st["dmean"] = o.detach(o.detach(st["mean"]))
            st["dinv"] = o.detach(o.detach(st["inv"]))
        else:
            st["dmean"], st["dinv"] = st["mean"], st["inv"]

    def embedding(self, tok):
        o, g, T, r = self.o, self.g, self.T, self.r
        h, s, b, V = HIDDEN, SEQ, MBS, VOCAB
        Vl = V // T
        P = self.P
        self.emb = E = {}
        if T > 1:
            self.at("emb_mask")
            lt = o.cmp_scalar("lt", tok, r * Vl)
            ge = o.cmp_scalar("ge", tok, (r + 1) * Vl)
            bor = o.bitwise_or(lt, ge)
            self.at("emb_sub")
            cl = o.clone(tok)
            sb = o.sub(cl, r * Vl)
            self.at("emb_put")
            c0 = g.getattr("_tensor_constant0", I64, self.style == "v2")
            lf = o.lift_fresh_copy(c0)
            masked = o.index_put(sb, [bor], lf)
            E["mask"], E["masked"] = bor, masked
            if self.style == "v1":
                self.at("emb_index")
                look = o.index(P["word"], [masked])
                self.at("emb_zero")
                c1 = g.getattr("_tensor_constant1", F32, False)
                lf1 = o.lift_fresh_copy(c1)
                sl = o.slice(look, 1, 0, INT_MAX)
                ip = o.index_put(sl, [bor], lf1)
                out = o.slice_scatter(look, ip, 1, 0, INT_MAX)
            else:
                self.at("emb_f")
                look = o.embedding(P["word"], masked)
                self.at("emb_zero")
                c1 = g.getattr("_tensor_constant1", F32, True)
                lf1 = o.lift_fresh_copy(c1)
                out = o.index_put(look, [bor], lf1)
            self.at("reduce_from")
            ar = o.all_reduce(out, "sum", self.group)
            w = o.wait(ar)
            wemb = o.copy(out, w)
        else:
            if self.style == "v1":
                self.at("emb_index")
                look = o.index(P["word"], [tok])
            else:
                self.at("emb_f")
                look = o.embedding(P["word"], tok)
            self.at("reduce_from")
            wemb = o.view(look, [b, s, h])
        E["look"] = look
        self.at("pos_emb")
        pe = o.embedding(P["pos"], self.pid)
        self.at("emb_add")
        if T > 1:
            wemb = o.view(wemb, [b, s, h])
        add = o.add(wemb, pe)
        self.at("emb_t")
        tr = o.transpose(add, 0, 1)
        x = o.clone(tr, contiguous=True)
        if self.sp:
            self.at("scatter_sp")
            x = o.slice(x, 0, r * self.sl, (r + 1) * self.sl)
            self.at("emb_clone")
            x = o.clone(x)
            self.at("emb_drop")
        else:
            self.at("emb_drop1")
        y, m = o.native_dropout(x, P_DROP)
        E["drop_mask"] = m
        return y

    def column_linear(self, x, w, bias, lnst, out_view="view"):
        """ColumnParallelLinear: all-gather the sequence shard (SP) or
        copy_to_tensor_model_parallel_region (identity view at tp 1)."""
        o = self.o
        s, b = SEQ, MBS
        if self.sp:
            self.at("linear")
            ag = o.all_gather(x, self.T, self.group)
            inp = o.wait(ag)
        else:
            self.at("copy_to")
            inp = o.view(x, [s, b, HIDDEN])
            self.at("linear")
        lnst["total"] = inp
        t = o.t(w)
        v = o.view(inp, [s * b, HIDDEN])
        mm = o.mm(v, t)
        if self.style == "v2":
            out = o.unsafe_view(mm, [s, b, w.shape[0]])
        else:
            out = o.view(mm, [s, b, w.shape[0]])
        if bias is not None:
            out = o.add(out, bias)
        return out

    def row_linear(self, x, w, st):
        """RowParallelLinear (input is parallel) + reduce_scatter_to_sequence_parallel_region
        (SP) or reduce_from_tensor_model_parallel_region (identity view at tp 1)."""
        o = self.o
        s, b, h = SEQ, MBS, HIDDEN
        self.at("linear")
        t = o.t(w)
        v = o.view(x, [s * b, x.shape[-1]])
        mm = o.mm(v, t)
        out = o.view(mm, [s, b, h]) if self.style == "v1" else o.unsafe_view(mm, [s, b, h])
        st["in"] = x
        if self.sp:
            self.at("rs_sp")
            e = o.empty([self.sl, b, h])
            rs = o.reduce_scatter(out, "sum", self.T, self.group)
            w_ = o.wait(rs)
            return o.copy(e, w_)
        self.at("reduce_from")
        return o.view(out, [s, b, h])

    def layer(self, x, d):
        o = self.o
        s, b, h, d_ = SEQ, MBS, HIDDEN, HEAD_DIM
        npl = HEADS // self.T
        st = d["st"] = {"x": x}
        self.at("apex")
        ln1, m1, i1 = o.fused_ln_fwd(x, d["ln1_w"], d["ln1_b"], h, EPS)
        st["ln1"] = dict(x=x, out=ln1, mean=m1, inv=i1)
        self.ln_detach(st["ln1"])
        qkv = self.column_linear(ln1, d["qkv_w"], d["qkv_b"], st["ln1"])
        self.at("qkv_view")
        v4 = o.view(qkv, [s, b, npl, 3 * d_])
        self.at("qkv_split")
        q, k, v = o.split_with_sizes(v4, [d_, d_, d_], 3)
        self.at("q_reshape")
        q5 = o.view(q, [s, b, npl, d_])
        self.at("q_view")
        q6 = o.view(q5, [s, b * npl, d_])
        self.at("k_view")
        k7 = o.view(k, [s, b * npl, -1])
        self.at("mm_buf")
        buf = o.empty([b * npl, s, s])
        self.at("q_t")
        t1 = o.transpose(q6, 0, 1)
        self.at("k_t")
        t2 = o.transpose(k7, 0, 1)
        t3 = o.transpose(t2, 1, 2)
        self.at("baddbmm")
        sc = o.baddbmm(buf, t1, t3, 0.0, ATTN_ALPHA)
        self.at("scores_view")
        v8 = o.view(sc, [b, npl, s, s])
        self.at("mask_fill")
        mf = o.masked_fill(v8, self.am, MASK_FILL)
        v9 = o.view(mf, [b * npl, s, s])
        v10 = o.view(v9, [b, npl, s, s])
        self.at("softmax")
        sm = o.softmax(v10, -1)
        self.at("attn_drop")
        probs, pmask = o.native_dropout(sm, P_DROP)
        self.at("v_view")
        v12 = o.view(v, [s, b * npl, -1])
        self.at("p_view")
        v13 = o.view(probs, [b * npl, s, -1])
        self.at("ctx_bmm")
        t4 = o.transpose(v12, 0, 1)
        ctx = o.bmm(v13, t4)
        self.at("ctx_view")
        v14 = o.view(ctx, [b, npl, s, d_])
        self.at("ctx_perm")
        pm = o.permute(v14, [2, 0, 1, 3])
        cl = o.clone(pm, contiguous=True)
        self.at("ctx_view2")
        v15 = o.view(cl, [s, b, npl * d_])
        st.update(t1=t1, t3=t3, sm=sm, pmask=pmask, v13=v13, t4=t4)
        st["proj"] = {}
        po = self.row_linear(v15, d["proj_w"], st["proj"])
        self.at("bda_bias")
        a2 = o.add(po, d["proj_b"])
        self.at("bda_drop")
        d1, dm1 = o.native_dropout(a2, P_DROP)
        self.at("bda_res")
        a3 = o.add(x, d1)
        st["dm1"] = dm1
        self.at("apex")
        ln2, m2, i2 = o.fused_ln_fwd(a3, d["ln2_w"], d["ln2_b"], h, EPS)
        st["ln2"] = dict(x=a3, out=ln2, mean=m2, inv=i2)
        self.ln_detach(st["ln2"])
        h1 = self.column_linear(ln2, d["fc1_w"], None, st["ln2"])
        self.at("mlp_bias")
        a4 = o.add(h1, d["fc1_b"])
        self.at("mlp_act")
        ge = o.gelu(a4)
        st.update(a4=a4, gelu=ge)
        st["fc2"] = {}
        fo = self.row_linear(ge, d["fc2_w"], st["fc2"])
        self.at("bda_bias")
        a5 = o.add(fo, d["fc2_b"])
        self.at("bda_drop")
        d2, dm2 = o.native_dropout(a5, P_DROP)
        self.at("bda_res")
        a6 = o.add(a3, d2)
        st["dm2"] = dm2
        return a6

    def cross_entropy(self, logits, lab):
        """_VocabParallelCrossEntropy.forward on this rank's vocab shard."""
        o, g, T, r = self.o, self.g, self.T, self.r
        s, b = SEQ, MBS
        Vl = VOCAB // T
        G = self.group
        c = self.ce = {}
        self.at("ce")
        mx = o.max_dim(logits, -1)
        gm = g.getitem(mx, 0)
        ar = o.all_reduce(gm, "max", G)
        w = o.wait(ar)
        cmax = o.copy(gm, w)
        lc = o.clone(logits)
        un = o.unsqueeze(cmax, -1)
        sub = o.sub(lc, un)
        lt = o.cmp_scalar("lt", lab, r * Vl)
        ge = o.cmp_scalar("ge", lab, (r + 1) * Vl)
        bor = o.bitwise_or(lt, ge)
        cl = o.clone(lab)
        sb = o.sub(cl, r * Vl)
        n0 = 2 if T > 1 else 0
        c0 = g.getattr("_tensor_constant%d" % n0, I64, self.style == "v2")
        lf = o.lift_fresh_copy(c0)
        mt = o.index_put(sb, [bor], lf)
        ar1d = o.arange(s * b)
        l2d = o.view(sub, [-1, Vl])
        mt1d = o.view(mt, [-1])
        pl = o.index(l2d, [ar1d, mt1d])
        plc = o.clone(pl)
        pv = o.view(plc, [s, b])
        c1 = g.getattr("_tensor_constant%d" % (n0 + 1), F32, self.style == "v2")
        lf1 = o.lift_fresh_copy(c1)
        pz = o.index_put(pv, [bor], lf1)
        pz1 = o.view(pz, [s * b])
        pz2 = o.view(pz1, [s, b])
        ex = o.unary("exp", sub)
        exl = o.copy(sub, ex)
        se = o.sum_dims(exl, [-1])
        ar2 = o.all_reduce(pz2, "sum", G)
        w2 = o.wait(ar2)
        pcp = o.copy(pz2, w2)
        p1 = o.view(pcp, [s * b])
        p2 = o.view(p1, [s, b])
        ar3 = o.all_reduce(se, "sum", G)
        w3 = o.wait(ar3)
        sec = o.copy(se, w3)
        lg = o.unary("log", sec)
        loss = o.sub(lg, p2)
        # exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1)): saved for the backward
        un2 = o.unsqueeze(sec, -1)
        soft = o.div(exl, un2)
        c.update(mask=bor, mt1d=mt1d, soft=soft)
        return loss

    # ---------------------------------------------------------- backward
    def backward(self):
        o, T, r = self.o, self.T, self.r
        s, b, h = SEQ, MBS, HIDDEN
        Vl = VOCAB // T
        P = self.P
        grads = self.grads = {}
        self.at("mb_div")
        g = o.div(self.tangent, 1)
        self.at("loss")
        g = o.div(g, self.loss_parts["s3"])
        g = o.expand(g, [s * b])
        g = o.mul(g, self.loss_parts["lmv"])
        g = o.view(g, [b, s])
        self.at("loss_t")
        g = o.transpose(g, 0, 1)
        # _VocabParallelCrossEntropy.backward
        self.at("ce")
        c = self.ce
        g2d = o.view(c["soft"], [-1, Vl])
        ar = o.arange(s * b)
        mv = o.view(c["mask"], [-1])
        mf = o.to_copy(mv, F32, device=False)
        upd = o.rsub_scalar(mf, 1.0)
        sel = o.index(g2d, [ar, c["mt1d"]])
        sel2 = o.sub(sel, upd)
        put = o.index_put(g2d, [ar, c["mt1d"]], sel2)
        gi = o.view(put, [s, b, Vl])
        un = o.unsqueeze(g, -1)
        glog = o.mul(gi, un)
        # output layer (column parallel, no bias)
        gx, gw, _ = self.column_linear_bwd(glog, P["out_w"], self.lnf, bias=False,
                                           bug_no_dgrad_sum=(self.bug == "vocab_input_grad"))
        grads[("p", id(P["out_w"]))] = gw
        self.at("apex")
        gx, gw, gb = self.ln_bwd(gx, self.lnf, P["lnf_w"], P["lnf_b"])
        grads[("p", id(P["lnf_w"]))] = gw
        grads[("p", id(P["lnf_b"]))] = gb
        for d in reversed(self.lp):
            gx = self.layer_bwd(gx, d)
        self.embedding_bwd(gx)
        if T > 1 and self.bug != "sp_ln_grad":
            self.finalize()
        self.bw_outputs = [grads.get(("p", id(p))) for p in self.primals]

    def ln_bwd(self, g, st, w, bias):
        o = self.o
        self.at("apex")
        if self.style == "v2":
            dm = o.detach(o.detach(st["dmean"]))
            di = o.detach(o.detach(st["dinv"]))
        else:
            dm, di = st["mean"], st["inv"]
        return o.fused_ln_bwd(g, dm, di, st["x"], HIDDEN, w, bias, EPS)

    def column_linear_bwd(self, g, w, lnst, bias, bug_no_dgrad_sum=False):
        """LinearWithGradAccumulationAndAsyncCommunication.backward with
        sequence_parallel: all-gather the input again for wgrad, reduce-scatter
        the input gradient."""
        o = self.o
        s, b, h = SEQ, MBS, HIDDEN
        out = w.shape[0]
        self.at("linear")
        if self.sp:
            ag = o.all_gather(lnst["out"], self.T, self.group)
            tot = o.wait(ag)
            if self.style == "v2":
                tot = o.wait(tot)
        else:
            tot = lnst["total"]
        v = o.view(g, [s * b, out])
        mm = o.mm(v, w)
        gin = o.unsafe_view(mm, [s, b, h])
        g2 = o.view(g, [s * b, out])
        t2 = o.view(tot, [s * b, h])
        if self.sp:
            if bug_no_dgrad_sum:
                # the input gradient is only split to this rank's sequence chunk, not summed
                self.at("split_sp")
                sl = o.slice(gin, 0, self.r * self.sl, (self.r + 1) * self.sl)
                gin = o.clone(sl, contiguous=True)
                self.at("linear")
            else:
                rs = o.reduce_scatter(gin, "sum", self.T, self.group)
                gin = o.wait(rs)
        tt = o.t(g2)
        gw = o.mm(tt, t2)
        gb = o.sum_dims(g2, [0]) if bias else None
        return gin, gw, gb

    def row_linear_bwd(self, g, w, st):
        o = self.o
        s, b, h = SEQ, MBS, HIDDEN
        if self.sp:
            self.at("rs_sp")
            e = o.empty([s, b, h])
            ag = o.all_gather(g, self.T, self.group)
            wt = o.wait(ag)
            g = o.copy(e, wt)
        self.at("linear")
        x = st["in"]
        v = o.view(g, [s * b, h])
        mm = o.mm(v, w)
        gin = o.unsafe_view(mm, [s, b, w.shape[1]])
        xv = o.view(x, [s * b, x.shape[-1]])
        gv = o.view(g, [s * b, h])
        tt = o.t(gv)
        gw = o.mm(tt, xv)
        return gin, gw

    def bias_grad(self, g, n):
        o = self.o
        sm = o.sum_dims(g, [0, 1], keepdim=True)
        return o.view(sm, [n])

    def layer_bwd(self, g6, d):
        o = self.o
        s, b, h, d_ = SEQ, MBS, HIDDEN, HEAD_DIM
        npl = HEADS // self.T
        st = d["st"]
        grads = self.grads
        gp = lambda name, v: grads.__setitem__(("p", id(d[name])), v)  # noqa: E731
        self.at("bda_drop")
        g5 = o.native_dropout_backward(g6, st["dm2"], DROP_SCALE)
        self.at("bda_bias")
        gp("fc2_b", self.bias_grad(g5, h))
        gge, gw = self.row_linear_bwd(g5, d["fc2_w"], st["fc2"])
        gp("fc2_w", gw)
        self.at("mlp_act")
        ga4 = o.gelu_backward(gge, st["a4"])
        self.at("mlp_bias")
        gp("fc1_b", self.bias_grad(ga4, FFN // self.T))
        gln2, gw, _ = self.column_linear_bwd(ga4, d["fc1_w"], st["ln2"], bias=False)
        gp("fc1_w", gw)
        gx2, gw2, gb2 = self.ln_bwd(gln2, st["ln2"], d["ln2_w"], d["ln2_b"])
        gp("ln2_w", gw2)
        gp("ln2_b", gb2)
        ga3 = o.add(g6, gx2)
        self.at("bda_drop")
        g2 = o.native_dropout_backward(ga3, st["dm1"], DROP_SCALE)
        self.at("bda_bias")
        gp("proj_b", self.bias_grad(g2, h))
        gctx, gw = self.row_linear_bwd(g2, d["proj_w"], st["proj"])
        gp("proj_w", gw)
        self.at("ctx_view2")
        g = o.view(gctx, [s, b, npl, d_])
        self.at("ctx_perm")
        g = o.permute(g, [1, 2, 0, 3])
        self.at("ctx_view")
        g = o.view(g, [b * npl, s, d_])
        self.at("ctx_bmm")
        t8 = o.transpose(st["v13"], 1, 2)
        gv = o.bmm(t8, g)
        t9 = o.transpose(st["t4"], 1, 2)
        gpr = o.bmm(g, t9)
        gv = o.transpose(gv, 0, 1)
        self.at("p_view")
        gpr = o.view(gpr, [b, npl, s, s])
        self.at("v_view")
        gv = o.view(gv, [s, b, npl, d_])
        self.at("attn_drop")
        gpr = o.native_dropout_backward(gpr, st["pmask"], DROP_SCALE)
        self.at("softmax")
        gsm = o.softmax_backward(gpr, st["sm"], -1)
        self.at("mask_fill")
        g = o.view(gsm, [b * npl, s, s])
        g = o.view(g, [b, npl, s, s])
        g = o.masked_fill(g, self.am, 0)
        self.at("scores_view")
        gsc = o.view(g, [b * npl, s, s])
        self.at("baddbmm")
        t11 = o.transpose(st["t3"], 1, 2)
        bq = o.bmm(gsc, t11)
        gq = o.mul_scalar(bq, ATTN_ALPHA)
        t12 = o.transpose(st["t1"], 1, 2)
        bk = o.bmm(t12, gsc)
        gk = o.mul_scalar(bk, ATTN_ALPHA)
        self.at("k_t")
        gk = o.transpose(gk, 1, 2)
        gk = o.transpose(gk, 0, 1)
        self.at("q_t")
        gq = o.transpose(gq, 0, 1)
        self.at("k_view")
        gk = o.view(gk, [s, b, npl, d_])
        self.at("q_view")
        gq = o.view(gq, [s, b, npl, d_])
        self.at("q_reshape")
        gq = o.view(gq, [s, b, npl, d_])
        self.at("qkv_split")
        gqkv = o.cat([gq, gk, gv], 3)
        self.at("qkv_view")
        gqkv = o.view(gqkv, [s, b, 3 * npl * d_])
        gln1, gw, gbias = self.column_linear_bwd(gqkv, d["qkv_w"], st["ln1"], bias=True)
        gp("qkv_w", gw)
        gp("qkv_b", gbias)
        gx1, gw1, gb1 = self.ln_bwd(gln1, st["ln1"], d["ln1_w"], d["ln1_b"])
        gp("ln1_w", gw1)
        gp("ln1_b", gb1)
        return o.add(ga3, gx1)

    def embedding_bwd(self, g):
        o, T = self.o, self.T
        s, b, h, V = SEQ, MBS, HIDDEN, VOCAB
        E, P = self.emb, self.P
        self.at("emb_drop" if self.sp else "emb_drop1")
        g = o.native_dropout_backward(g, E["drop_mask"], DROP_SCALE)
        if self.sp:
            self.at("scatter_sp")
            e = o.empty([s, b, h])
            ag = o.all_gather(g, T, self.group)
            w = o.wait(ag)
            g = o.copy(e, w)
        self.at("emb_t")
        g = o.transpose(g, 0, 1)
        self.at("pos_emb")
        self.grads[("p", id(P["pos"]))] = o.embedding_dense_backward(g, self.pid, s)
        Vl = V // T
        if self.style == "v1":
            if T > 1:
                self.at("emb_zero")
                sl = o.slice(g, 1, 0, INT_MAX)
                z = o.zeros([], F32, layout=True, cpu=True)
                ip = o.index_put(sl, [E["mask"]], z)
                g = o.slice_scatter(g, ip, 1, 0, INT_MAX)
                idx = E["masked"]
            else:
                idx = self.tok
            self.at("emb_index")
            nz = o.new_zeros(g, [Vl, h])
            gw = o.index_put(nz, [idx], g, accumulate=True)
        else:
            if T > 1:
                self.at("emb_zero")
                z = o.zeros([], F32, layout=True, cpu=True)
                g = o.index_put(g, [E["mask"]], z)
                idx = E["masked"]
            else:
                idx = self.tok
            self.at("emb_f")
            gw = o.embedding_dense_backward(g, idx, Vl)
        self.grads[("p", id(P["word"]))] = gw

    def sp_params(self):
        """The parameters Megatron marks `sequence_parallel` (LayerNorms and the
        row-parallel biases), in named_parameters() order."""
        out = []
        for d in self.lp:
            out += [d["ln1_w"], d["ln1_b"], d["proj_b"], d["ln2_w"], d["ln2_b"], d["fc2_b"]]
        return out + [self.P["lnf_w"], self.P["lnf_b"]]

    def finalize(self):
        finalize_allreduce(self.o, self.g, self.grads, self.sp_params(), TP_GROUP)


def finalize_allreduce(o, g, grads, params, group):
    """finalize_model_grads -> _allreduce_layernorm_grads: flatten, all-reduce
    over the tensor-parallel group, unflatten, copy back."""
    g.loc = loc("ln_flat")
    gs = [grads[("p", id(p))] for p in params]
    flat = [o.view(x if x.strides == contiguous_strides(x.shape) else o.clone(x, contiguous=True), [-1])
            for x in gs]
    cat = o.cat(flat, 0)
    g.loc = loc("ln_ar")
    ar = o.all_reduce(cat, "sum", group)
    w = o.wait(ar)
    cc = o.copy(cat, w)
    g.loc = loc("ln_unflat")
    off = 0
    for p, x in zip(params, gs):
        n = x.shape[0] if len(x.shape) == 1 else x.shape[0] * x.shape[1]
        sl = o.slice(cc, 0, off, off + n)
        v = o.view(sl, list(x.shape))
        grads[("p", id(p))] = o.copy(x, v)
        off += n


# ================================================================== SwitchMLP

class Switch:
    """The MLP half of a legacy Megatron ParallelTransformerLayer whose MLP is a
    top-1 SwitchMLP (megatron/legacy/model/transformer.py), with sequence
    parallelism, expert-parallel size 1 and tensor-parallel experts without
    biases, as one joint graph (forward + backward + finalize_model_grads'
    all-reduce of the `sequence_parallel` parameters' gradients: the
    LayerNorm's and the router's)."""

    def __init__(self, T, r, bug=None):
        self.T, self.r, self.bug = T, r, bug
        self.sp = T > 1
        self.g = Graph()
        self.o = Ops(self.g, device_index=r)
        self.build()

    def at(self, key):
        self.g.loc = loc(key)

    def build(self):
        g, o, T, r = self.g, self.o, self.T, self.r
        s, b, h, E, f = SEQ, MBS, HIDDEN, EXPERTS, FFN
        sl = s // T
        fl = f // T
        ph = g.placeholder
        P = self.P = {}
        P["ln_w"] = ph("primals_1", F32, [h])
        P["ln_b"] = ph("primals_2", F32, [h])
        P["router"] = ph("primals_3", F32, [E, h])
        k = 4
        self.experts = []
        for _ in range(E):
            e = {"fc1": ph("primals_%d" % k, F32, [fl, h]), "fc2": ph("primals_%d" % (k + 1), F32, [h, fl])}
            k += 2
            self.experts.append(e)
        P["hidden"] = ph("primals_%d" % k, F32, [sl, b, h])
        self.primals = [P["ln_w"], P["ln_b"], P["router"]] + \
            [x for e in self.experts for x in (e["fc1"], e["fc2"])] + [P["hidden"]]
        self.tangent = g.placeholder("tangents_1", F32, [sl, b, h], section="bw")
        x = P["hidden"]
        G = TP_EP_GROUP
        # post-attention LayerNorm on the sequence shard
        self.at("sw_ln")
        ln, mean, inv = o.fused_ln_fwd(x, P["ln_w"], P["ln_b"], h, EPS)
        dm = o.detach(o.detach(mean))
        di = o.detach(o.detach(inv))
        # router
        self.at("sw_route")
        rv = o.view(ln, [sl * b, h])
        rt = o.t(P["router"])
        rmm = o.mm(rv, rt)
        ru = o.unsafe_view(rmm, [sl, b, E])
        route = o.view(ru, [-1, E])
        self.at("sw_softmax")
        prob = o.softmax(route, 1)
        self.at("sw_argmax")
        dprob = o.detach(prob)
        mx = o.max_dim(dprob, 1)
        ind = g.getitem(mx, 1)
        self.at("sw_maxprob")
        ar = o.arange(sl * b)
        mp = o.index(prob, [ar, ind])
        self.at("sw_unsq")
        mpu = o.unsqueeze(mp, 1)
        self.at("sw_hview")
        hv = o.view(ln, [-1, h])
        if self.sp:
            self.at("gather_sp")
            e1 = o.empty([s * b, h])
            ag = o.all_gather(hv, T, G)
            w = o.wait(ag)
            gh = o.copy(e1, w)
            self.at("sw_gather_idx")
            e2 = o.empty([s * b], I64)
            ag2 = o.all_gather(ind, T, G)
            w2 = o.wait(ag2)
            gi = o.copy(e2, w2)
        else:
            gh, gi = hv, ind
        self.at("sw_zeros")
        tot = o.zeros_like(gh)
        st = []
        for ei, e in enumerate(self.experts):
            self.at("sw_mask")
            eq = o.cmp_scalar("eq", gi, ei)
            un = o.unsqueeze(eq, 1)
            mask = o.to_copy(un, F32, device=False)
            if not self.sp:
                self.at("copy_to")
                inp = o.view(gh, [s * b, h])
            else:
                inp = gh
            self.at("linear")
            t1 = o.t(e["fc1"])
            h1 = o.mm(inp, t1)
            self.at("sw_expert_act")
            ge = o.gelu(h1)
            self.at("linear")
            t2 = o.t(e["fc2"])
            h2 = o.mm(ge, t2)
            if not self.sp:
                self.at("reduce_from")
                h2 = o.view(h2, [s * b, h])
            self.at("sw_accum")
            pm = o.mul(h2, mask)
            tot = o.add(tot, pm)
            st.append(dict(mask=mask, inp=inp, h1=h1, ge=ge, h2=h2))
        if self.sp:
            self.at("rs_sp")
            e3 = o.empty([sl * b, h])
            rs = o.reduce_scatter(tot, "sum", T, G)
            w3 = o.wait(rs)
            tot = o.copy(e3, w3)
        self.at("sw_prob")
        outp = o.mul(tot, mpu)
        self.at("sw_oview")
        ov = o.view(outp, [sl, b, h])
        self.at("sw_drop")
        dd, dmask = o.native_dropout(ov, P_DROP)
        self.at("sw_res")
        self.out = o.add(x, dd)

        # ------------------------------------------------------ backward
        g.section = "bw"
        grads = {}
        gt = self.tangent
        self.at("sw_drop")
        gd = o.native_dropout_backward(gt, dmask, DROP_SCALE)
        self.at("sw_oview")
        gd = o.view(gd, [sl * b, h])
        self.at("sw_prob")
        gtot = o.mul(gd, mpu)
        gmp = o.mul(gd, tot)
        gmp = o.sum_dims(gmp, [1], keepdim=True)
        if self.sp:
            self.at("rs_sp")
            e4 = o.empty([s * b, h])
            ag = o.all_gather(gtot, T, G)
            w = o.wait(ag)
            gtot = o.copy(e4, w)
        ghs = None
        for ei in reversed(range(E)):
            e, sd = self.experts[ei], st[ei]
            self.at("sw_accum")
            gh2 = o.mul(gtot, sd["mask"])
            self.at("linear")
            gge = o.mm(gh2, e["fc2"])
            tt = o.t(gh2)
            grads[id(e["fc2"])] = o.mm(tt, sd["ge"])
            self.at("sw_expert_act")
            gh1 = o.gelu_backward(gge, sd["h1"])
            self.at("linear")
            gin = o.mm(gh1, e["fc1"])
            tt1 = o.t(gh1)
            grads[id(e["fc1"])] = o.mm(tt1, sd["inp"])
            ghs = gin if ghs is None else o.add(ghs, gin)
        if self.sp:
            self.at("gather_sp")
            e5 = o.empty([sl * b, h])
            rs = o.reduce_scatter(ghs, "sum", T, G)
            w = o.wait(rs)
            ghs = o.copy(e5, w)
        self.at("sw_hview")
        ghv = o.view(ghs, [sl, b, h])
        self.at("sw_unsq")
        gmp = o.squeeze_dim(gmp, 1)
        self.at("sw_maxprob")
        nz = o.new_zeros(gmp, [sl * b, E])
        gprob = o.index_put(nz, [ar, ind], gmp, accumulate=True)
        self.at("sw_softmax")
        groute = o.softmax_backward(gprob, prob, 1)
        self.at("sw_route")
        gr = o.view(groute, [sl, b, E])
        gr2 = o.view(gr, [sl * b, E])
        tr = o.t(rv)
        gwt = o.mm(tr, gr2)
        grads[id(P["router"])] = o.t(gwt)
        trt = o.t(rt)
        gln_r = o.mm(gr2, trt)
        gln_r = o.view(gln_r, [sl, b, h])
        gln = o.add(ghv, gln_r)
        self.at("sw_ln")
        dm2 = o.detach(o.detach(dm))
        di2 = o.detach(o.detach(di))
        gx, gw, gb = o.fused_ln_bwd(gln, dm2, di2, x, h, P["ln_w"], P["ln_b"], EPS)
        grads[id(P["ln_w"])] = gw
        grads[id(P["ln_b"])] = gb
        self.at("sw_res")
        grads[id(P["hidden"])] = o.add(gt, gx)
        if self.sp:
            params = [P["ln_w"], P["ln_b"]] + ([] if self.bug == "router_grad" else [P["router"]])
            gg = {("p", id(p)): grads[id(p)] for p in params}
            finalize_allreduce(o, g, gg, params, TP_GROUP)
            for p in params:
                grads[id(p)] = gg[("p", id(p))]
        self.grads = grads
        self.bw_outputs = [grads[id(p)] for p in self.primals]


# ================================================================== configs

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
    "switchmlp_tp2": lambda out: gen_switch(out, "switchmlp_tp2", 2),
    "switchmlp_tp2.bug_router_grad": lambda out: gen_switch(out, "switchmlp_tp2.bug_router_grad", 2, "router_grad"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "test", "fixtures", "megatron-fx"))
    ap.add_argument("configs", nargs="*", help="default: all (%s)" % ", ".join(CONFIGS))
    a = ap.parse_args()
    for c in a.configs or list(CONFIGS):
        CONFIGS[c](os.path.normpath(a.out))
        print("wrote", os.path.join(os.path.normpath(a.out), c))


if __name__ == "__main__":
    main()
