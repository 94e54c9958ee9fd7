"""Megatron GPT under TP + SP as printed graphs: the Gpt builder (tools/corpus/megatron_fx.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fxir import INT_MAX, Graph, contiguous_strides, partition, render  # noqa: E402,F401
from atenops import B8, F32, I32, I64, Ops  # noqa: E402,F401
from mfx_common import (HIDDEN, HEADS, SEQ, MBS, VOCAB, FFN, HEAD_DIM, EPS, P_DROP, DROP_SCALE, ATTN_ALPHA, MASK_FILL, TP_GROUP, TP1_GROUP, EXPERTS, TP_EP_GROUP, MEG, TORCH, L, loc, HEADER)  # noqa: E402,F401


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
