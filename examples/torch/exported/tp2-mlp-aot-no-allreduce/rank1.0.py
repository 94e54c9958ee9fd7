class GraphModule(torch.nn.Module):
    def forward(self, primals_1: "f32[8, 8]", primals_2: "f32[8, 8]", primals_3: "f32[4, 8]", primals_4: "f32[4, 8]"):
        # File: examples/torch/tp_mlp.py:31 in forward, code: h = F.gelu(F.linear(x, self.w1))
        t: "f32[8, 8]" = torch.ops.aten.t.default(primals_1);  primals_1 = None
        mm: "f32[4, 8]" = torch.ops.aten.mm.default(primals_3, t);  t = None
        gelu: "f32[4, 8]" = torch.ops.aten.gelu.default(mm)
        
        # File: examples/torch/tp_mlp.py:33 in forward, code: out = F.linear(h, self.w2)
        t_1: "f32[8, 8]" = torch.ops.aten.t.default(primals_2)
        mm_1: "f32[4, 8]" = torch.ops.aten.mm.default(gelu, t_1);  t_1 = None
        
        # File: examples/torch/tp_mlp.py:34 in forward, code: loss = F.mse_loss(out, y)
        mse_loss: "f32[]" = torch.ops.aten.mse_loss.default(mm_1, primals_4)
        return (mse_loss, primals_2, primals_3, primals_4, mm, gelu, mm_1)
        
