class train_step(torch.nn.Module):
    def forward(self, x_1: "f32[4, 8]", y_1: "f32[4, 8]", w1_1: "f32[8, 8]", w2_1: "f32[8, 8]"):
        # File: examples/torch/tp_mlp.py:31 in train_step, code: h = F.linear(x, w1)
        t: "f32[8, 8]" = torch.ops.aten.t.default(w1_1)
        mm: "f32[4, 8]" = torch.ops.aten.mm.default(x_1, t);  t = None
        
        # File: examples/torch/tp_mlp.py:32 in train_step, code: a = F.dropout(F.gelu(h), p=0.1)
        gelu: "f32[4, 8]" = torch.ops.aten.gelu.default(mm)
        native_dropout = torch.ops.aten.native_dropout.default(gelu, 0.1, True);  gelu = None
        getitem: "f32[4, 8]" = native_dropout[0]
        getitem_1: "b8[4, 8]" = native_dropout[1];  native_dropout = None
        
        # File: examples/torch/tp_mlp.py:33 in train_step, code: out = F.linear(a, w2)
        t_1: "f32[8, 8]" = torch.ops.aten.t.default(w2_1)
        mm_1: "f32[4, 8]" = torch.ops.aten.mm.default(getitem, t_1);  t_1 = None
        
        # File: examples/torch/tp_mlp.py:33 in train_step, code: out = reduce_from_tp_region(out)
        all_reduce: "f32[4, 8]" = torch.ops._c10d_functional.all_reduce.default(mm_1, 'sum', '0');  mm_1 = None
        wait_tensor: "f32[4, 8]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce);  all_reduce = None
        
        # File: examples/torch/tp_mlp.py:34 in train_step, code: loss = F.mse_loss(out, y)
        mse_loss: "f32[]" = torch.ops.aten.mse_loss.default(wait_tensor, y_1)
        
        # File: examples/torch/tp_mlp.py:35 in train_step, code: g1, g2 = torch.autograd.grad(loss, [w1, w2])
        ones_like: "f32[]" = torch.ops.aten.ones_like.default(mse_loss, pin_memory = False, memory_format = torch.preserve_format)
        mse_loss_backward: "f32[4, 8]" = torch.ops.aten.mse_loss_backward.default(ones_like, wait_tensor, y_1, 1);  ones_like = wait_tensor = None
        t_2: "f32[8, 4]" = torch.ops.aten.t.default(mse_loss_backward)
        mm_2: "f32[8, 8]" = torch.ops.aten.mm.default(t_2, getitem);  t_2 = getitem = None
        mm_3: "f32[4, 8]" = torch.ops.aten.mm.default(mse_loss_backward, w2_1);  mse_loss_backward = None
        native_dropout_backward: "f32[4, 8]" = torch.ops.aten.native_dropout_backward.default(mm_3, getitem_1, 1.1111111111111112);  mm_3 = getitem_1 = None
        gelu_backward: "f32[4, 8]" = torch.ops.aten.gelu_backward.default(native_dropout_backward, mm);  native_dropout_backward = mm = None
        t_3: "f32[8, 4]" = torch.ops.aten.t.default(gelu_backward);  gelu_backward = None
        mm_4: "f32[8, 8]" = torch.ops.aten.mm.default(t_3, x_1);  t_3 = x_1 = None
        
        # File: examples/torch/tp_mlp.py:37 in train_step, code: w1 = w1 - lr * g1
        mul: "f32[8, 8]" = torch.ops.aten.mul.Tensor(mm_4, 0.1);  mm_4 = None
        sub: "f32[8, 8]" = torch.ops.aten.sub.Tensor(w1_1, mul);  w1_1 = mul = None
        
        # File: examples/torch/tp_mlp.py:38 in train_step, code: w2 = w2 - lr * g2
        mul_1: "f32[8, 8]" = torch.ops.aten.mul.Tensor(mm_2, 0.1);  mm_2 = None
        sub_1: "f32[8, 8]" = torch.ops.aten.sub.Tensor(w2_1, mul_1);  w2_1 = mul_1 = None
        return (mse_loss, sub, sub_1)
        
