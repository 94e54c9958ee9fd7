"""A top-1 switch MLP under TP as printed graphs: the Switch builder (tools/corpus/megatron_fx.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fxir import INT_MAX, Graph, contiguous_strides, partition, render  # noqa: E402,F401
from atenops import B8, F32, I32, I64, Ops  # noqa: E402,F401
from mfx_common import (HIDDEN, HEADS, SEQ, MBS, VOCAB, FFN, HEAD_DIM, EPS, P_DROP, DROP_SCALE, ATTN_ALPHA, MASK_FILL, TP_GROUP, TP1_GROUP, EXPERTS, TP_EP_GROUP, MEG, TORCH, L, loc, HEADER)  # noqa: E402,F401
from mfx_gpt import (Gpt, finalize_allreduce)  # noqa: E402,F401


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
