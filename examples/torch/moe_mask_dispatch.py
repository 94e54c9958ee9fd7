"""A Mixtral-style top-2 mixture-of-experts block under data parallelism (issue 33), for
`planproof capture --nproc 2 --axis dp`.

The MoE block is written as Hugging Face's `MixtralSparseMoeBlock` writes it: a router linear,
softmax in float, `torch.topk` of the top-2 experts, the two weights renormalised to sum to 1,
then dispatch by boolean mask: `F.one_hot(selected, E).permute(2, 1, 0)`, and for each expert
`idx, top_x = torch.where(expert_mask[e])`, the expert (SwiGLU: `w2(silu(w1(x)) * w3(x))`)
applied to `hidden_states[None, top_x]`, scaled by `routing_weights[top_x, idx, None]` and
accumulated with `index_add_`. Each rank takes its sequences; gradients are all-reduced and
averaged by hand; SGD.

`--style mistral`: the MoE layer as mistral-src's `MoeLayer` writes it instead: `torch.topk` of the
router logits, softmax over the top-2, and per expert `batch_idx, nth_expert =
torch.where(selected_experts == i)`, `results[batch_idx] += weights[batch_idx, nth_expert, None] *
expert(inputs[batch_idx])`.

`--style switch`: a top-1 Switch Transformer layer with expert capacity as Hugging Face's
`SwitchTransformersTop1Router` / `SwitchTransformersSparseMLP` write it: `torch.argmax` of the
router probabilities, `F.one_hot`, token priority `torch.cumsum(expert_index, dim=-2)` within each
sequence, `expert_index * (token_priority <= expert_capacity)`, `torch.max(probs, dim=-1).values`,
then per expert `token_indices = router_mask[:, :, idx].bool()`,
`next_states[token_indices] = expert(hidden_states[token_indices])` (tokens over capacity keep
their input), scaled by the router probability.

`--bug`: rank 1 does not renormalise its top-2 routing weights (its config has
`norm_topk_prob=False`, the checkpoint's other ranks `True`).
With `--style switch`, `--bug` counts the token priority over the rank's whole batch
(`cumsum` over the flattened tokens, a capacity shared by the sequences of the batch): the tokens
dropped depend on how the batch is split.
`--seed N`: the parameters' seed (default 3 for Switch, 0 otherwise); with `--style switch
--seed 0` no token of rank 0 picks expert 2 (an expert with an empty selection).
`--seq-len N`: tokens per sequence (default 4); short sequences leave Mixtral's experts empty.
`--bug-router`: the router's gradient is not all-reduced (only the experts' are, as when the
gate is left out of the data-parallel gradient group).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_ROUTER = "--bug-router" in sys.argv
STYLE = sys.argv[sys.argv.index("--style") + 1] if "--style" in sys.argv else "mixtral"
SEQ = int(sys.argv[sys.argv.index("--seq-len") + 1]) if "--seq-len" in sys.argv else 4
SEED = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else None
HIDDEN, FFN, NUM_EXPERTS, TOP_K = 4, 6, 3, 2


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden_dim, ffn_dim):
        super().__init__()
        self.w1 = nn.Linear(hidden_dim, ffn_dim, bias=False)
        self.w2 = nn.Linear(ffn_dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(hidden_dim, ffn_dim, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        return self.w2(current_hidden_states)


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, hidden_dim, ffn_dim, num_experts, top_k, norm_topk_prob=True):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.num_experts = num_experts
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(hidden_dim, ffn_dim) for _ in range(num_experts)])

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        # router_logits: (batch * sequence_length, n_experts)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        # we cast back to the input dtype
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )

        # One hot encode the selected experts to create an expert mask
        # this will be used to easily index which expert is going to be sollicitated
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)

        # Loop over all available experts in the model and perform the computation on each expert
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])

            # Index the correct hidden states and compute the expert hidden state for
            # the current expert. We need to make sure to multiply the output hidden
            # states by `routing_weights` on the corresponding tokens (top-1 and top-2)
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]

            # However `index_add_` only support torch tensors for indexing so we'll use
            # the `top_x` tensor here.
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class SwitchTransformersTop1Router(nn.Module):
    def __init__(self, hidden_size, num_experts, expert_capacity):
        super().__init__()
        self.num_experts = num_experts
        self.expert_capacity = expert_capacity
        self.classifier = nn.Linear(hidden_size, num_experts, bias=False)

    def forward(self, hidden_states):
        router_logits = self.classifier(hidden_states)
        router_probs = nn.functional.softmax(router_logits, dim=-1, dtype=torch.float32)
        expert_index = torch.argmax(router_probs, dim=-1)
        expert_index = torch.nn.functional.one_hot(expert_index, num_classes=self.num_experts)
        if BUG:
            # the priority counted over the whole batch, not per sequence
            token_priority = torch.cumsum(expert_index.view(-1, self.num_experts), dim=0).view(expert_index.shape)
        else:
            # Mask tokens outside expert capacity. Sum over each sequence
            token_priority = torch.cumsum(expert_index, dim=-2)
        # mask if the token routed to to the expert will overflow
        expert_capacity_mask = token_priority <= self.expert_capacity
        expert_index = expert_index * expert_capacity_mask
        router_probs = torch.max(router_probs, dim=-1).values.unsqueeze(-1)
        return expert_index, router_probs, router_logits


class SwitchTransformersDenseActDense(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.act = nn.GELU()

    def forward(self, hidden_states):
        return self.wo(self.act(self.wi(hidden_states)))


class SwitchTransformersSparseMLP(nn.Module):
    def __init__(self, hidden_dim, ffn_dim, num_experts, expert_capacity=2):
        super().__init__()
        self.gate = SwitchTransformersTop1Router(hidden_dim, num_experts, expert_capacity)
        self.experts = nn.ModuleDict({f"expert_{i}": SwitchTransformersDenseActDense(hidden_dim, ffn_dim) for i in range(num_experts)})

    def forward(self, hidden_states):
        router_mask, router_probs, router_logits = self.gate(hidden_states)
        expert_index = torch.argmax(router_mask, dim=-1)
        next_states = hidden_states.clone()
        for idx, expert in enumerate(self.experts.values()):
            token_indices = router_mask[:, :, idx].bool()
            next_states[token_indices] = expert(hidden_states[token_indices]).to(next_states.dtype)
        hidden_states = router_probs * next_states
        return hidden_states, (router_logits, expert_index)


class MoeLayer(nn.Module):
    """mistral-src's MoeLayer (the gate and experts given)."""

    def __init__(self, experts, gate, num_experts_per_tok, normalize=True):
        super().__init__()
        self.experts = nn.ModuleList(experts)
        self.gate = gate
        self.num_experts_per_tok = num_experts_per_tok
        self.normalize = normalize

    def forward(self, inputs):
        gate_logits = self.gate(inputs)
        weights, selected_experts = torch.topk(gate_logits, self.num_experts_per_tok)
        if self.normalize:
            weights = F.softmax(weights, dim=1, dtype=torch.float).to(inputs.dtype)
        else:
            weights = F.softmax(gate_logits, dim=1, dtype=torch.float).gather(1, selected_experts).to(inputs.dtype)
        results = torch.zeros_like(inputs)
        for i, expert in enumerate(self.experts):
            batch_idx, nth_expert = torch.where(selected_experts == i)
            results[batch_idx] += weights[batch_idx, nth_expert, None] * expert(inputs[batch_idx])
        return results


class MistralBlock(nn.Module):
    """The same parameters as MixtralSparseMoeBlock (gate, experts), run by mistral-src's MoeLayer."""

    def __init__(self, hidden_dim, ffn_dim, num_experts, top_k, norm_topk_prob=True):
        super().__init__()
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(hidden_dim, ffn_dim) for _ in range(num_experts)])
        self.moe = MoeLayer(self.experts, self.gate, top_k, normalize=norm_topk_prob)

    def forward(self, hidden_states):
        b, t, h = hidden_states.shape
        return self.moe(hidden_states.view(-1, h)).view(b, t, h), None


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    # (seed 3 for Switch: with seed 0 no token of rank 0 picks expert 2, an empty selection)
    # (`--seed N` overrides it: small runs leave experts empty all the time)
    torch.manual_seed(SEED if SEED is not None else 3 if STYLE == "switch" else 0)
    if STYLE == "switch":
        model = SwitchTransformersSparseMLP(HIDDEN, FFN, NUM_EXPERTS)
    else:
        block = MistralBlock if STYLE == "mistral" else MixtralSparseMoeBlock
        model = block(HIDDEN, FFN, NUM_EXPERTS, TOP_K, norm_topk_prob=not (BUG and rank == 1))
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(4, SEQ, HIDDEN, generator=g), name="data")
    target = cap.replicate(torch.randn(4, SEQ, HIDDEN, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        x, y = data.chunk(ws)[rank], target.chunk(ws)[rank]
        out, _ = model(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        for name, p in model.named_parameters():
            if BUG_ROUTER and name.startswith("gate"):
                continue
            dist.all_reduce(p.grad)
            p.grad /= ws
        opt.step()
    if STYLE == "switch":
        cap.output("gate_new", model.gate.classifier.weight, "R")
        cap.output("experts_0_wi_new", model.experts["expert_0"].wi.weight, "R")
        cap.output("experts_2_wo_new", model.experts["expert_2"].wo.weight, "R")
    else:
        cap.output("gate_new", model.gate.weight, "R")
        cap.output("experts_0_w1_new", model.experts[0].w1.weight, "R")
        cap.output("experts_2_w2_new", model.experts[2].w2.weight, "R")
