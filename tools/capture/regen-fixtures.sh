#!/usr/bin/env bash
# Regenerates the committed capture fixtures (test/fixtures/capture/) with Debian's
# python3-torch: each example, correct and with its bug flags, captured on 2 gloo processes
# (or the mesh given, e.g. pp=2,dp=2,tp=2: 8 processes),
# with the logical run's input and output values (values.json: the numeric check of the
# ATen mapping). The fixtures let npm test import and verify real captures without Python
# (test/capture.test.ts).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=test/fixtures/capture
py=${PYTHON:-/usr/bin/python3}
while read -r name script axis flags; do
  rm -rf "${out:?}/$name"
  # shellcheck disable=SC2086 # flags are words
  # axis: a 1-D mesh of 2 processes on that axis, or a mesh spelled dp=2,tp=2
  mesh=$axis
  [[ $axis == *=* ]] || mesh="$axis=2"
  nproc=$(python3 -c "import math,sys; print(math.prod(int(p.split('=')[1]) for p in sys.argv[1].split(',')))" "$mesh")
  "$py" tools/capture/planproof_capture.py --nproc "$nproc" --mesh "$mesh" --values --out "$out/$name" "examples/torch/$script" $flags
  rm -f "$out/$name"/meta.*.json "$out/$name"/capture-stats.json
done <<'LIST'
tp_mlp tp_mlp.py tp
tp_mlp-bug tp_mlp.py tp --bug
ddp_mlp ddp_mlp.py dp
ddp_mlp-bug ddp_mlp.py dp --bug
ddp_mlp-bug-shard ddp_mlp.py dp --bug-shard
ops_mix ops_mix.py dp
ops_mix-bug ops_mix.py dp --bug
gather_mlp gather_mlp.py dp
gather_mlp-bug gather_mlp.py dp --bug
adamw_mlp adamw_mlp.py dp
adamw_mlp-bug adamw_mlp.py dp --bug
gpt_block_sp gpt_block_sp.py tp
gpt_block_sp-bug gpt_block_sp.py tp --bug
gpt_block_sp-bug-ce gpt_block_sp.py tp --bug-ce
dtensor_mlp dtensor_mlp.py tp
dtensor_mlp-bug dtensor_mlp.py tp --bug
llama_tp llama_tp.py tp
llama_tp-bug llama_tp.py tp --bug
llama_tp-bug-grad llama_tp.py tp --bug-grad
ddp_clip ddp_clip.py dp --micro 1
ddp_clip-bug ddp_clip.py dp --micro 1 --bug
ddp_clip-bug-avg ddp_clip.py dp --micro 1 --bug-avg
ddp_clip-micro2 ddp_clip.py dp
ddp_clip-micro2-bug ddp_clip.py dp --bug
ddp_clip-micro2-bug-avg ddp_clip.py dp --bug-avg
ddp_adamw ddp_adamw.py dp
ddp_adamw-bug ddp_adamw.py dp --bug
dp_tp_mlp dp_tp_mlp.py dp=2,tp=2
dp_tp_mlp-bug dp_tp_mlp.py dp=2,tp=2 --bug
pipeline_sendrecv pipeline_sendrecv.py pp
pipeline_sendrecv-bug pipeline_sendrecv.py pp --bug
zero2_sgd zero2_sgd.py dp
zero2_sgd-bug zero2_sgd.py dp --bug
alltoall_exchange alltoall_exchange.py ep
alltoall_exchange-bug alltoall_exchange.py ep --bug
ddp_nosync ddp_nosync.py dp
ddp_nosync-bug ddp_nosync.py dp --bug
lm_label_smoothing lm_label_smoothing.py dp
lm_label_smoothing-bug lm_label_smoothing.py dp --bug
vocab_parallel_embedding vocab_parallel_embedding.py tp
vocab_parallel_embedding-bug vocab_parallel_embedding.py tp --bug
moe_top1 moe_top1.py dp
moe_top1-topk moe_top1.py dp --router topk
moe_top1-argmax moe_top1.py dp --router argmax
moe_top1-bug moe_top1.py dp --bug
moe_ep_alltoall moe_ep_alltoall.py ep
moe_ep_alltoall-onehot moe_ep_alltoall.py ep --counts onehot
moe_ep_alltoall-histc moe_ep_alltoall.py ep --counts histc
moe_ep_alltoall-top2 moe_ep_alltoall.py ep --top 2
moe_ep_alltoall-top2-bug moe_ep_alltoall.py ep --top 2 --bug
moe_ep_alltoall-top2-bug-router moe_ep_alltoall.py ep --top 2 --bug-router
moe_ep_alltoall-bug moe_ep_alltoall.py ep --bug
moe_ep_alltoall-bug-router moe_ep_alltoall.py ep --bug-router
moe_ep_alltoall-tokens2 moe_ep_alltoall.py ep --tokens 2
moe_ep_alltoall-tokens2-bug-router moe_ep_alltoall.py ep --tokens 2 --bug-router
moe_mask_dispatch moe_mask_dispatch.py dp
moe_mask_dispatch-bug moe_mask_dispatch.py dp --bug
moe_mask_dispatch-bug-router moe_mask_dispatch.py dp --bug-router
moe_mask_dispatch-mistral moe_mask_dispatch.py dp --style mistral
moe_mask_dispatch-mistral-bug moe_mask_dispatch.py dp --style mistral --bug
moe_mask_dispatch-switch moe_mask_dispatch.py dp --style switch
moe_mask_dispatch-switch-bug moe_mask_dispatch.py dp --style switch --bug
moe_mask_dispatch-switch-bug-router moe_mask_dispatch.py dp --style switch --bug-router
moe_mask_dispatch-switch-seed0 moe_mask_dispatch.py dp --style switch --seed 0
moe_mask_dispatch-switch-seed0-bug moe_mask_dispatch.py dp --style switch --seed 0 --bug
moe_mask_dispatch-switch-empty moe_mask_dispatch.py dp --style switch --seed 0 --seq-len 1
moe_mask_dispatch-switch-empty-bug moe_mask_dispatch.py dp --style switch --seed 0 --seq-len 1 --bug
moe_mask_dispatch-empty moe_mask_dispatch.py dp --seed 0 --seq-len 1
moe_mask_dispatch-empty-bug moe_mask_dispatch.py dp --seed 0 --seq-len 1 --bug
moe_mask_dispatch-mistral-empty moe_mask_dispatch.py dp --style mistral --seed 0 --seq-len 1
moe_mask_dispatch-mistral-empty-bug moe_mask_dispatch.py dp --style mistral --seed 0 --seq-len 1 --bug
llama_tp-neginf llama_tp.py tp --neg-inf
llama_tp-neginf-bug llama_tp.py tp --neg-inf --bug
zero1_allgather zero1_allgather.py dp
zero1_allgather-base zero1_allgather.py dp --api base
zero1_allgather-bug zero1_allgather.py dp --bug
reduce_to_root reduce_to_root.py dp
reduce_to_root-bug reduce_to_root.py dp --bug
scatter_gather scatter_gather.py dp
scatter_gather-bug scatter_gather.py dp --bug
sync_minmax sync_minmax.py dp
sync_minmax-bug sync_minmax.py dp --bug
megatron_tp_pp megatron_3d.py pp=2,tp=2
megatron_tp_pp-bug megatron_3d.py pp=2,tp=2 --bug
megatron_3d megatron_3d.py pp=2,dp=2,tp=2
megatron_3d-bug megatron_3d.py pp=2,dp=2,tp=2 --bug
megatron_clip megatron_clip.py dp
megatron_clip-bug megatron_clip.py dp --bug
nanogpt_ddp nanogpt_ddp.py dp
nanogpt_ddp-bug nanogpt_ddp.py dp --bug
clip_contrastive clip_contrastive.py dp
clip_contrastive-bug clip_contrastive.py dp --bug
pipeline_1f1b pipeline_1f1b.py pp
pipeline_1f1b-bug pipeline_1f1b.py pp --bug
additive_mask_dp additive_mask_dp.py dp
additive_mask_dp-bug additive_mask_dp.py dp --bug
additive_mask_dp-triu additive_mask_dp.py dp --mask triu
additive_mask_dp-triu-bug additive_mask_dp.py dp --mask triu --bug
additive_mask_dp-fill additive_mask_dp.py dp --mask fill
additive_mask_dp-fill-bug additive_mask_dp.py dp --mask fill --bug
additive_mask_cp additive_mask_cp.py cp
additive_mask_cp-bug additive_mask_cp.py cp --bug
ddp_cnn ddp_cnn.py dp
ddp_cnn-bug ddp_cnn.py dp --bug
ddp_cnn-geometry ddp_cnn.py dp --geometry
ddp_cnn-ties ddp_cnn.py dp --ties
ddp_cnn-bn ddp_cnn.py dp --bn
ddp_cnn-strided ddp_cnn.py dp --rows strided
ddp_cnn-strided-bug ddp_cnn.py dp --rows strided --bug
ddp_cnn-strided-b32 ddp_cnn.py dp --rows strided --batch 32
ddp_cnn-strided-b32-bug ddp_cnn.py dp --rows strided --batch 32 --bug
mingpt_ddp mingpt_ddp.py dp
mingpt_ddp-bug mingpt_ddp.py dp --bug
ddp_transformer ddp_transformer.py dp
ddp_transformer-bug ddp_transformer.py dp --bug
lstm_lm_ddp lstm_lm_ddp.py dp
llama_meta_tp llama_meta_tp.py tp
llama_meta_tp-bug llama_meta_tp.py tp --bug
llama_meta_tp-bug-grad llama_meta_tp.py tp --bug-grad
ddp_mha ddp_mha.py dp
ddp_mha-bug ddp_mha.py dp --bug
hf_gpt2_ddp hf_gpt2_ddp.py dp
hf_gpt2_ddp-bug hf_gpt2_ddp.py dp --bug
vit_ddp vit_ddp.py dp
vit_ddp-bug vit_ddp.py dp --bug
checkpoint_ddp checkpoint_ddp.py dp
checkpoint_ddp-bug checkpoint_ddp.py dp --bug
ddp_losses ddp_losses.py dp
ddp_losses-bug ddp_losses.py dp --bug
ddp_losses-mse_sum ddp_losses.py dp --loss mse_sum
ddp_losses-huber ddp_losses.py dp --loss huber
ddp_losses-huber-bug ddp_losses.py dp --loss huber --bug
ddp_losses-smoothl1 ddp_losses.py dp --loss smoothl1
ddp_losses-bce ddp_losses.py dp --loss bce
ddp_losses-bce-bug ddp_losses.py dp --loss bce --bug
ddp_losses-kl ddp_losses.py dp --loss kl
ddp_losses-kl-bug ddp_losses.py dp --loss kl --bug
ddp_optim ddp_optim.py dp
ddp_optim-bug ddp_optim.py dp --bug
ddp_optim-rmsprop ddp_optim.py dp --opt rmsprop
ddp_optim-adagrad ddp_optim.py dp --opt adagrad
ddp_optim-amsgrad ddp_optim.py dp --opt amsgrad
ddp_optim-groups ddp_optim.py dp --opt groups
ddp_optim-groups-bug ddp_optim.py dp --opt groups --bug
ddp_gradtricks ddp_gradtricks.py dp
ddp_gradtricks-bug ddp_gradtricks.py dp --bug
ddp_gradtricks-inf ddp_gradtricks.py dp --clip inf
ddp_gradtricks-inf-bug ddp_gradtricks.py dp --clip inf --bug
ddp_gradtricks-l1 ddp_gradtricks.py dp --clip l1
t5_encoder_ddp t5_encoder_ddp.py dp
t5_encoder_ddp-bug t5_encoder_ddp.py dp --bug
ddp_losses-nll_w ddp_losses.py dp --loss nll_w
ddp_losses-nll_w-bug ddp_losses.py dp --loss nll_w --bug
ddp_losses-nll_w_mean ddp_losses.py dp --loss nll_w_mean
ddp_losses-cosine ddp_losses.py dp --loss cosine
ddp_losses-cosine-bug ddp_losses.py dp --loss cosine --bug
ddp_optim-onecycle ddp_optim.py dp --opt onecycle
ddp_optim-onecycle-bug ddp_optim.py dp --opt onecycle --bug
ddp_optim-warmup_cosine ddp_optim.py dp --opt warmup_cosine
ddp_optim-warmup_cosine-bug ddp_optim.py dp --opt warmup_cosine --bug
bert_pad_ddp bert_pad_ddp.py dp
bert_pad_ddp-bug bert_pad_ddp.py dp --bug
gru_classifier_ddp gru_classifier_ddp.py dp
gru_classifier_ddp-bug gru_classifier_ddp.py dp --bug
reinforce_ddp reinforce_ddp.py dp
reinforce_ddp-bug reinforce_ddp.py dp --bug
einsum_attn_tp einsum_attn_tp.py tp
einsum_attn_tp-bug einsum_attn_tp.py tp --bug
einsum_attn_tp-dp_tp einsum_attn_tp.py dp=2,tp=2
einsum_attn_tp-dp_tp-bug-ddp einsum_attn_tp.py dp=2,tp=2 --bug-ddp
einsum_attn_tp-ddp einsum_attn_tp.py dp=2,tp=1 --tp 1
resnet_syncbn_ddp resnet_syncbn_ddp.py dp
resnet_syncbn_ddp-bug resnet_syncbn_ddp.py dp --bug
hf_accum_cosine_ddp hf_accum_cosine_ddp.py dp
hf_accum_cosine_ddp-bug hf_accum_cosine_ddp.py dp --bug
hetero_regression_ddp hetero_regression_ddp.py dp
hetero_regression_ddp-bug hetero_regression_ddp.py dp --bug
ddp_comm_hook ddp_comm_hook.py dp
ddp_comm_hook-bug ddp_comm_hook.py dp --bug
ddp_comm_hook-default ddp_comm_hook.py dp --hook default
zero_adamw_ddp zero_adamw_ddp.py dp
zero_adamw_ddp-bug zero_adamw_ddp.py dp --bug
mha_padded_lm_ddp mha_padded_lm_ddp.py dp
mha_padded_lm_ddp-bug mha_padded_lm_ddp.py dp --bug
embbag_textcls_ddp embbag_textcls_ddp.py dp
embbag_textcls_ddp-sum embbag_textcls_ddp.py dp --mode sum
embbag_textcls_ddp-bug embbag_textcls_ddp.py dp --bug
embbag_textcls_ddp-padded embbag_textcls_ddp.py dp --padded
embbag_textcls_ddp-padded-sum embbag_textcls_ddp.py dp --padded --mode sum
embbag_textcls_ddp-padded-bug embbag_textcls_ddp.py dp --padded --bug
autocast_bf16_ddp autocast_bf16_ddp.py dp
autocast_bf16_ddp-bug autocast_bf16_ddp.py dp --bug
ddp_multitask_unused ddp_multitask_unused.py dp
ddp_multitask_unused-bug ddp_multitask_unused.py dp --bug
seqpar_pool_ddp seqpar_pool_ddp.py dp
seqpar_pool_ddp-bug seqpar_pool_ddp.py dp --bug
seq2seq_attn_ddp seq2seq_attn_ddp.py dp
seq2seq_attn_ddp-bug seq2seq_attn_ddp.py dp --bug
seq2seq_attn_ddp-bug-encoder seq2seq_attn_ddp.py dp --bug-encoder
prenorm_encoder_pad_ddp prenorm_encoder_pad_ddp.py dp
prenorm_encoder_pad_ddp-bug prenorm_encoder_pad_ddp.py dp --bug
prenorm_encoder_pad_ddp-mean prenorm_encoder_pad_ddp.py dp --pool mean
prenorm_encoder_pad_ddp-mean-bug prenorm_encoder_pad_ddp.py dp --pool mean --bug
vae_ddp vae_ddp.py dp
vae_ddp-bug vae_ddp.py dp --bug
gan_ddp gan_ddp.py dp
gan_ddp-bug gan_ddp.py dp --bug
aux_flag_ddp aux_flag_ddp.py dp
aux_flag_ddp-bug aux_flag_ddp.py dp --bug
mixed_task_ddp mixed_task_ddp.py dp
mixed_task_ddp-bug mixed_task_ddp.py dp --bug
gumbel_quantizer_ddp gumbel_quantizer_ddp.py dp
gumbel_quantizer_ddp-bug gumbel_quantizer_ddp.py dp --bug
mobilenet_ddp mobilenet_ddp.py dp
mobilenet_ddp-bug mobilenet_ddp.py dp --bug
groupnorm_cnn_ddp groupnorm_cnn_ddp.py dp
groupnorm_cnn_ddp-bug groupnorm_cnn_ddp.py dp --bug
denoise_ae_ddp denoise_ae_ddp.py dp
denoise_ae_ddp-bug denoise_ae_ddp.py dp --bug
unet_seg_ddp unet_seg_ddp.py dp
unet_seg_ddp-bug unet_seg_ddp.py dp --bug
multilabel_cnn_ddp multilabel_cnn_ddp.py dp
multilabel_cnn_ddp-bug multilabel_cnn_ddp.py dp --bug
wavenet_vocoder_ddp wavenet_vocoder_ddp.py dp
wavenet_vocoder_ddp-bug wavenet_vocoder_ddp.py dp --bug
roberta_bucket_ddp roberta_bucket_ddp.py dp
roberta_bucket_ddp-bug roberta_bucket_ddp.py dp --bug
LIST
rm -rf tools/capture/__pycache__
