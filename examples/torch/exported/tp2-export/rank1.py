class GraphModule(torch.nn.Module):
    def forward(self, p_fc1_weight: "f32[8, 8]", p_fc1_bias: "f32[8]", p_fc2_weight: "f32[8, 8]", p_norm_weight: "f32[8]", p_norm_bias: "f32[8]", x: "f32[4, 8]", labels: "i64[4]"):
         # File: examples/torch/tp_block.py:20 in forward, code: h = self.norm(x)
        layer_norm: "f32[4, 8]" = torch.ops.aten.layer_norm.default(x, [8], p_norm_weight, p_norm_bias, 1e-05);  x = p_norm_weight = p_norm_bias = None
        
         # File: examples/torch/tp_block.py:21 in forward, code: h = F.gelu(self.fc1(h))
        linear: "f32[4, 8]" = torch.ops.aten.linear.default(layer_norm, p_fc1_weight, p_fc1_bias);  layer_norm = p_fc1_weight = p_fc1_bias = None
        gelu: "f32[4, 8]" = torch.ops.aten.gelu.default(linear);  linear = None
        
         # File: examples/torch/tp_block.py:22 in forward, code: out = self.fc2(h)
        linear_1: "f32[4, 8]" = torch.ops.aten.linear.default(gelu, p_fc2_weight);  gelu = p_fc2_weight = None
        all_reduce: "f32[4, 8]" = torch.ops._c10d_functional.all_reduce.default(linear_1, 'sum', '0');  linear_1 = None
        wait_tensor: "f32[4, 8]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce);  all_reduce = None
        
         # File: examples/torch/tp_block.py:23 in forward, code: return F.cross_entropy(out, labels)
        cross_entropy_loss: "f32[]" = torch.ops.aten.cross_entropy_loss.default(wait_tensor, labels, None, 1, -100, 0.0);  wait_tensor = labels = None
        return (cross_entropy_loss,)
        
