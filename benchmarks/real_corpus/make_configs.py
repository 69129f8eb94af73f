"""Writes benchmarks/real_corpus/<name>/config.json: published hyperparameters of each model,
typed by hand from its model card / paper / the Hub's config.json as documented (no download:
the Hub is not reachable from here). Keys left out take the transformers config class default."""
import json
from pathlib import Path

HERE = Path(__file__).parent
C = {}

# ---- recent decoders -------------------------------------------------------------------
C["llama-3.2-1b"] = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256, hidden_size=2048,
    intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
    max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192))
C["gemma-3-1b-pt"] = dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", vocab_size=262144,
    hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
    head_dim=256, sliding_window=512, max_position_embeddings=32768, query_pre_attn_scalar=256, rope_theta=1000000.0,
    rope_local_base_freq=10000.0, rms_norm_eps=1e-6)
C["qwen3-1.7b"] = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936, hidden_size=2048,
    intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
    max_position_embeddings=40960, rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)
C["olmo-2-0425-1b"] = dict(architectures=["Olmo2ForCausalLM"], model_type="olmo2", vocab_size=100352,
    hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
    max_position_embeddings=4096, rope_theta=500000.0, rms_norm_eps=1e-6)
C["smollm2-1.7b"] = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=49152, hidden_size=2048,
    intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=32,
    max_position_embeddings=8192, rope_theta=130000.0, tie_word_embeddings=True, rms_norm_eps=1e-5)
C["granite-3.1-2b-base"] = dict(architectures=["GraniteForCausalLM"], model_type="granite", vocab_size=49155,
    hidden_size=2048, intermediate_size=8192, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8,
    max_position_embeddings=131072, rope_theta=5000000.0, embedding_multiplier=12.0, logits_scaling=8.0,
    residual_multiplier=0.22, attention_multiplier=0.015625, tie_word_embeddings=True)
C["glm-4-9b-0414"] = dict(architectures=["Glm4ForCausalLM"], model_type="glm4", vocab_size=151552, hidden_size=4096,
    intermediate_size=13696, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=2, head_dim=128,
    max_position_embeddings=32768, partial_rotary_factor=0.5, attention_bias=True, rms_norm_eps=1e-5)
C["phi-4-mini"] = dict(architectures=["Phi3ForCausalLM"], model_type="phi3", vocab_size=200064, hidden_size=3072,
    intermediate_size=8192, num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8,
    max_position_embeddings=131072, original_max_position_embeddings=4096, partial_rotary_factor=0.75,
    tie_word_embeddings=True, rope_theta=10000.0)  # longrope rescale factors left out (no shape depends on them)
C["smollm3-3b"] = dict(architectures=["SmolLM3ForCausalLM"], model_type="smollm3", vocab_size=128256,
    hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4,
    max_position_embeddings=65536, rope_theta=5000000.0, tie_word_embeddings=True)
# ---- MoE -------------------------------------------------------------------------------
C["olmoe-1b-7b-0924"] = dict(architectures=["OlmoeForCausalLM"], model_type="olmoe", vocab_size=50304,
    hidden_size=2048, intermediate_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
    num_experts=64, num_experts_per_tok=8, max_position_embeddings=4096, rope_theta=10000.0)
C["qwen3-30b-a3b"] = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", vocab_size=151936,
    hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
    num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
    decoder_sparse_step=1, norm_topk_prob=True, max_position_embeddings=40960, rope_theta=1000000.0)
C["phi-3.5-moe"] = dict(architectures=["PhimoeForCausalLM"], model_type="phimoe", vocab_size=32064, hidden_size=4096,
    intermediate_size=6400, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    num_local_experts=16, num_experts_per_tok=2, max_position_embeddings=131072, rope_theta=10000.0)
C["granite-3.0-1b-a400m"] = dict(architectures=["GraniteMoeForCausalLM"], model_type="granitemoe", vocab_size=49155,
    hidden_size=1024, intermediate_size=512, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=8,
    num_local_experts=32, num_experts_per_tok=8, max_position_embeddings=4096, embedding_multiplier=12.0,
    logits_scaling=6.0, residual_multiplier=0.22, attention_multiplier=0.015625, tie_word_embeddings=True)
C["gpt-oss-20b"] = dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss", vocab_size=201088,
    hidden_size=2880, intermediate_size=2880, num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8,
    head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131072)
# ---- SSM / hybrids -----------------------------------------------------------------------
C["mamba-130m"] = dict(architectures=["MambaForCausalLM"], model_type="mamba", vocab_size=50280, hidden_size=768,
    num_hidden_layers=24, state_size=16, expand=2, conv_kernel=4, time_step_rank=48)
C["mamba2-130m"] = dict(architectures=["Mamba2ForCausalLM"], model_type="mamba2", vocab_size=50288,
    hidden_size=768, num_hidden_layers=24, state_size=128, head_dim=64, num_heads=24, n_groups=1, expand=2,
    conv_kernel=4, chunk_size=256, tie_word_embeddings=True)
C["falcon-mamba-7b"] = dict(architectures=["FalconMambaForCausalLM"], model_type="falcon_mamba", vocab_size=65024,
    hidden_size=4096, num_hidden_layers=64, state_size=16, expand=2, conv_kernel=4,
    time_step_rank=256, mixer_rms_eps=1e-6)
C["jamba-v0.1"] = dict(architectures=["JambaForCausalLM"], model_type="jamba", vocab_size=65536, hidden_size=4096,
    intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    num_experts=16, num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1, attn_layer_period=8,
    attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=256,
    max_position_embeddings=262144, use_mamba_kernels=False)
C["bamba-9b"] = dict(architectures=["BambaForCausalLM"], model_type="bamba", vocab_size=128256, hidden_size=4096,
    intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    attn_layer_indices=[9, 18, 27], mamba_n_heads=128, mamba_d_state=128, mamba_d_head=64, mamba_n_groups=1,
    mamba_expand=2, mamba_chunk_size=256, mamba_d_conv=4, max_position_embeddings=262144)
C["recurrentgemma-2b"] = dict(architectures=["RecurrentGemmaForCausalLM"], model_type="recurrent_gemma",
    vocab_size=256000, hidden_size=2560, intermediate_size=15360, num_hidden_layers=26, num_attention_heads=10,
    num_key_value_heads=1, lru_width=2560, attention_window_size=2048, conv1d_width=4, logits_soft_cap=30.0,
    block_types=["recurrent", "recurrent", "attention"])
# ---- encoders ----------------------------------------------------------------------------
C["modernbert-base"] = dict(architectures=["ModernBertForMaskedLM"], model_type="modernbert", vocab_size=50368,
    hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
    max_position_embeddings=8192, global_attn_every_n_layers=3, local_attention=128)
C["longformer-base-4096"] = dict(architectures=["LongformerForMaskedLM"], model_type="longformer", vocab_size=50265,
    hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
    max_position_embeddings=4098, attention_window=[512] * 12, type_vocab_size=1, pad_token_id=1)
C["bigbird-roberta-base"] = dict(architectures=["BigBirdForMaskedLM"], model_type="big_bird", vocab_size=50358,
    hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
    max_position_embeddings=4096, attention_type="block_sparse", block_size=64, num_random_blocks=3)
C["mpnet-base"] = dict(architectures=["MPNetForMaskedLM"], model_type="mpnet", vocab_size=30527, hidden_size=768,
    intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, max_position_embeddings=514,
    relative_attention_num_buckets=32)
C["canine-s"] = dict(architectures=["CanineModel"], model_type="canine", hidden_size=768, intermediate_size=3072,
    num_hidden_layers=12, num_attention_heads=12, max_position_embeddings=16384, downsampling_rate=4,
    num_hash_functions=8, num_hash_buckets=16384, upsampling_kernel_size=4)
# ---- seq2seq with odd vocabularies ----------------------------------------------------------
C["fsmt-wmt19-en-de"] = dict(architectures=["FSMTForConditionalGeneration"], model_type="fsmt", langs=["en", "de"],
    src_vocab_size=42024, tgt_vocab_size=42024, d_model=1024, encoder_layers=6, decoder_layers=6,
    encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=8192, decoder_ffn_dim=8192,
    max_position_embeddings=1024, activation_function="relu", scale_embedding=True, tie_word_embeddings=False)
C["opus-mt-en-de"] = dict(architectures=["MarianMTModel"], model_type="marian", vocab_size=58101, d_model=512,
    encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
    decoder_ffn_dim=2048, max_position_embeddings=512, pad_token_id=58100, decoder_start_token_id=58100,
    activation_function="swish", scale_embedding=True, static_position_embeddings=True)
C["mbart-large-50"] = dict(architectures=["MBartForConditionalGeneration"], model_type="mbart", vocab_size=250054,
    d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16, decoder_attention_heads=16,
    encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024, scale_embedding=True)
C["pegasus-x-base"] = dict(architectures=["PegasusXForConditionalGeneration"], model_type="pegasus_x",
    vocab_size=96103, d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
    decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=16384,
    block_size=512, num_global_tokens=128, stagger_local_blocks=True)
C["led-base-16384"] = dict(architectures=["LEDForConditionalGeneration"], model_type="led", vocab_size=50265,
    d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12, decoder_attention_heads=12,
    encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_encoder_position_embeddings=16384,
    max_decoder_position_embeddings=1024, attention_window=[1024] * 6)
C["m2m100-418m"] = dict(architectures=["M2M100ForConditionalGeneration"], model_type="m2m_100", vocab_size=128112,
    d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16, decoder_attention_heads=16,
    encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024, scale_embedding=True)
C["mt5-small"] = dict(architectures=["MT5ForConditionalGeneration"], model_type="mt5", vocab_size=250112,
    d_model=512, d_ff=1024, d_kv=64, num_layers=8, num_decoder_layers=8, num_heads=6,
    feed_forward_proj="gated-gelu", tie_word_embeddings=False, relative_attention_num_buckets=32)
C["byt5-small"] = dict(architectures=["T5ForConditionalGeneration"], model_type="t5", vocab_size=384, d_model=1472,
    d_ff=3584, d_kv=64, num_layers=12, num_decoder_layers=4, num_heads=6, feed_forward_proj="gated-gelu",
    tie_word_embeddings=False)
# ---- speech --------------------------------------------------------------------------------
C["speecht5-asr"] = dict(architectures=["SpeechT5ForSpeechToText"], model_type="speecht5", vocab_size=81,
    hidden_size=768, encoder_layers=12, decoder_layers=6, encoder_attention_heads=12, decoder_attention_heads=12,
    encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_speech_positions=4000, max_text_positions=450)
C["musicgen-small"] = dict(architectures=["MusicgenForConditionalGeneration"], model_type="musicgen",
    text_encoder=dict(model_type="t5", vocab_size=32128, d_model=768, d_ff=3072, d_kv=64, num_layers=12, num_heads=12),
    audio_encoder=dict(model_type="encodec", sampling_rate=32000, audio_channels=1, codebook_size=2048,
                       codebook_dim=128, hidden_size=128, num_filters=64, num_residual_layers=1,
                       upsampling_ratios=[8, 5, 4, 4], target_bandwidths=[2.2], norm_type="weight_norm",
                       use_causal_conv=False, compress=2, num_lstm_layers=2, residual_kernel_size=3,
                       kernel_size=7, last_kernel_size=7, dilation_growth_rate=2, normalize=False, pad_mode="reflect",
                       use_conv_shortcut=False),
    decoder=dict(model_type="musicgen_decoder", vocab_size=2048, hidden_size=1024, num_hidden_layers=24,
                 num_attention_heads=16, ffn_dim=4096, num_codebooks=4, max_position_embeddings=2048,
                 pad_token_id=2048, bos_token_id=2048, decoder_start_token_id=2048),
    decoder_start_token_id=2048, pad_token_id=2048)
C["hubert-base-ls960"] = dict(architectures=["HubertModel"], model_type="hubert", hidden_size=768,
    num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, feat_extract_norm="group",
    conv_dim=[512] * 7, conv_stride=[5, 2, 2, 2, 2, 2, 2], conv_kernel=[10, 3, 3, 3, 3, 2, 2])
C["wavlm-base-plus"] = dict(architectures=["WavLMModel"], model_type="wavlm", hidden_size=768, num_hidden_layers=12,
    num_attention_heads=12, intermediate_size=3072, conv_dim=[512] * 7, conv_stride=[5, 2, 2, 2, 2, 2, 2],
    conv_kernel=[10, 3, 3, 3, 3, 2, 2], num_buckets=320, max_bucket_distance=800)
C["whisper-large-v3"] = dict(architectures=["WhisperForConditionalGeneration"], model_type="whisper",
    vocab_size=51866, d_model=1280, encoder_layers=32, decoder_layers=32, encoder_attention_heads=20,
    decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120, num_mel_bins=128,
    max_source_positions=1500, max_target_positions=448)
# ---- vision (transformers) --------------------------------------------------------------------
C["dinov2-large-518"] = dict(architectures=["Dinov2Model"], model_type="dinov2", hidden_size=1024,
    num_hidden_layers=24, num_attention_heads=16, mlp_ratio=4, patch_size=14, image_size=518, layerscale_value=1.0)
C["detr-resnet-50"] = dict(architectures=["DetrForObjectDetection"], model_type="detr", use_timm_backbone=True,
    backbone="resnet50", use_pretrained_backbone=False, num_queries=100, d_model=256, encoder_layers=6,
    decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
    decoder_ffn_dim=2048, num_labels=91)
C["deit-base-distilled"] = dict(architectures=["DeiTForImageClassificationWithTeacher"], model_type="deit",
    hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, image_size=224,
    patch_size=16, num_labels=1000)
C["convnextv2-tiny"] = dict(architectures=["ConvNextV2ForImageClassification"], model_type="convnextv2",
    hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3], image_size=224, num_labels=1000)
C["sam-vit-huge"] = dict(architectures=["SamModel"], model_type="sam",
    vision_config=dict(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16, global_attn_indexes=[7, 15, 23, 31],
                       image_size=1024, patch_size=16, window_size=14, output_channels=256, mlp_dim=5120))
# ---- multimodal --------------------------------------------------------------------------------
C["llava-1.5-7b"] = dict(architectures=["LlavaForConditionalGeneration"], model_type="llava", image_token_index=32000,
    projector_hidden_act="gelu", vision_feature_layer=-2, vision_feature_select_strategy="default",
    image_seq_length=576,
    text_config=dict(model_type="llama", vocab_size=32064, hidden_size=4096, intermediate_size=11008,
                     num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                     max_position_embeddings=4096, rms_norm_eps=1e-5),
    vision_config=dict(model_type="clip_vision_model", hidden_size=1024, image_size=336, intermediate_size=4096,
                       num_attention_heads=16, num_hidden_layers=24, patch_size=14, projection_dim=768))
C["paligemma-3b-pt-224"] = dict(architectures=["PaliGemmaForConditionalGeneration"], model_type="paligemma",
    image_token_index=257152, hidden_size=2048, projection_dim=2048,
    text_config=dict(model_type="gemma", vocab_size=257216, hidden_size=2048, intermediate_size=16384,
                     num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                     num_image_tokens=256),
    vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                       num_hidden_layers=27, num_attention_heads=16, patch_size=14, image_size=224,
                       projection_dim=2048, projector_hidden_act="gelu_fast", vision_use_head=False))
C["idefics2-8b"] = dict(architectures=["Idefics2ForConditionalGeneration"], model_type="idefics2",
    image_token_id=32001,
    perceiver_config=dict(model_type="idefics2_perceiver", resampler_n_latents=64, resampler_depth=3,
                          resampler_n_heads=16, resampler_head_dim=96, num_key_value_heads=4),
    text_config=dict(model_type="mistral", vocab_size=32003, hidden_size=4096, intermediate_size=14336,
                     num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     max_position_embeddings=32768, sliding_window=4096, rope_theta=10000.0),
    vision_config=dict(model_type="idefics2_vision", hidden_size=1152, intermediate_size=4304,
                       num_hidden_layers=27, num_attention_heads=16, patch_size=14, image_size=980))
C["siglip-base-patch16-224"] = dict(architectures=["SiglipModel"], model_type="siglip",
    text_config=dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                     num_attention_heads=12, max_position_embeddings=64),
    vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       image_size=224, patch_size=16))

for name, cfg in C.items():
    d = HERE / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
print(len(C), "configs")
