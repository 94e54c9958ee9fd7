class GraphModule(torch.nn.Module):
    def forward(self, primals_2: "f32[8, 8]", primals_3: "f32[4, 8]", primals_4: "f32[4, 8]", mm: "f32[4, 8]", gelu: "f32[4, 8]", mm_1: "f32[4, 8]", tangents_1: "f32[]"):
        # File: examples/torch/tp_mlp.py:34 in forward, code: loss = F.mse_loss(out, y)
        mse_loss_backward: "f32[4, 8]" = torch.ops.aten.mse_loss_backward.default(tangents_1, mm_1, primals_4, 1);  tangents_1 = mm_1 = primals_4 = None
        
        # File: examples/torch/tp_mlp.py:33 in forward, code: out = F.linear(h, self.w2)
        t_2: "f32[8, 4]" = torch.ops.aten.t.default(mse_loss_backward)
        mm_2: "f32[8, 8]" = torch.ops.aten.mm.default(t_2, gelu);  t_2 = gelu = None
        mm_3: "f32[4, 8]" = torch.ops.aten.mm.default(mse_loss_backward, primals_2);  mse_loss_backward = primals_2 = None
        
        # File: examples/torch/tp_mlp.py:31 in forward, code: h = F.gelu(F.linear(x, self.w1))
        gelu_backward: "f32[4, 8]" = torch.ops.aten.gelu_backward.default(mm_3, mm);  mm_3 = mm = None
        t_3: "f32[8, 4]" = torch.ops.aten.t.default(gelu_backward);  gelu_backward = None
        mm_4: "f32[8, 8]" = torch.ops.aten.mm.default(t_3, primals_3);  t_3 = primals_3 = None
        return [mm_4, mm_2, None, None]
        
