"""Sizes, groups and the Megatron/torch source locations the printed graphs cite (tools/corpus/megatron_fx.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fxir import INT_MAX, Graph, contiguous_strides, partition, render  # noqa: E402,F401
from atenops import B8, F32, I32, I64, Ops  # noqa: E402,F401
# ------------------------------------------------------------------ sizes
HIDDEN, HEADS, SEQ, MBS, VOCAB, FFN = 16, 4, 8, 2, 32, 64
# MFX_HEADS=8 (for tp 8): 8 heads of the same head dim, hidden and FFN scaled with them. Not
# used by the committed fixtures; for timing larger configs (docs/benchmarks.md).
if os.environ.get("MFX_HEADS"):
    HEADS = int(os.environ["MFX_HEADS"])
    HIDDEN, FFN = 4 * HEADS, 16 * HEADS
# MFX_DIMS=hidden,heads,seq,mbs,vocab,ffn: any widths (timing at real sizes only, not committed).
if os.environ.get("MFX_DIMS"):
    HIDDEN, HEADS, SEQ, MBS, VOCAB, FFN = (int(v) for v in os.environ["MFX_DIMS"].split(","))
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
