"""The reviewed list of onnx node test cases hwadapter skips, grouped by reason (tests/test_onnx_conformance.py).

Every case here is refused when its model is converted (an op, attribute, mode or dtype hwadapter does not convert;
at prepare, or at run for a model converted per value of an input), so the conformance test checks each one
cheaply: one that converts and passes now must be taken off this list. A case that runs and gives a wrong result
is never listed: it is a bug. Draft a new list from the real statuses with
`scripts/onnx-conformance --devices cpu --skips-draft tests/onnx_skips.py`, then review the reasons.
"""
from __future__ import annotations

#: reason -> the cases skipped for it (whitespace-separated names).
GROUPS: dict[str, str] = {
    ('dtype bfloat16 has no hwadapter dtype: numpy has none (ml_dtypes\' bfloat16 is of kind V, not a float to numpy, '
     'and its reductions accumulate in bfloat16), and no plugin kernel or kernel-primitive dialect stores or rounds '
     'it (docs/dtypes.md)'): """
        test_attention_3d_causal_bf16 test_attention_3d_causal_bf16_expanded test_attention_4d_attn_mask_causal_bf16
        test_attention_4d_attn_mask_causal_bf16_expanded test_attention_4d_causal_bf16
        test_attention_4d_causal_bf16_expanded test_attention_4d_causal_padded_kv_bf16
        test_attention_4d_causal_padded_kv_bf16_expanded test_attention_4d_padded_kv_bf16
        test_attention_4d_padded_kv_bf16_expanded test_cast_BFLOAT16_to_FLOAT test_cast_FLOAT_to_BFLOAT16
        test_castlike_BFLOAT16_to_FLOAT test_castlike_BFLOAT16_to_FLOAT_expanded test_castlike_FLOAT_to_BFLOAT16
        test_castlike_FLOAT_to_BFLOAT16_expanded test_celu_bfloat16 test_celu_bfloat16_expanded
        test_compress_bfloat16 test_einsum_batch_matmul_bfloat16 test_einsum_sum_bfloat16
        test_einsum_transpose_bfloat16 test_onehot_with_bfloat16_values test_range_bfloat16_type_positive_delta
        test_reversesequence_bfloat16 test_unique_bfloat16_sorted_without_axis
        test_range_bfloat16_type_positive_delta_expanded
    """,
    'dtype float4e2m1 has no hwadapter dtype': """
        test_cast_FLOAT16_to_FLOAT4E2M1 test_cast_FLOAT4E2M1_to_FLOAT test_cast_FLOAT4E2M1_to_FLOAT16
        test_cast_FLOAT_to_FLOAT4E2M1 test_castlike_FLOAT16_to_FLOAT4E2M1
        test_castlike_FLOAT16_to_FLOAT4E2M1_expanded test_castlike_FLOAT4E2M1_to_FLOAT
        test_castlike_FLOAT4E2M1_to_FLOAT16 test_castlike_FLOAT4E2M1_to_FLOAT16_expanded
        test_castlike_FLOAT4E2M1_to_FLOAT_expanded test_castlike_FLOAT_to_FLOAT4E2M1
        test_castlike_FLOAT_to_FLOAT4E2M1_expanded test_dequantizelinear_float4e2m1 test_quantizelinear_float4e2m1
    """,
    'dtype float8e4m3fn has no hwadapter dtype': """
        test_cast_FLOAT16_to_FLOAT8E4M3FN test_cast_FLOAT8E4M3FN_to_FLOAT test_cast_FLOAT8E4M3FN_to_FLOAT16
        test_cast_FLOAT_to_FLOAT8E4M3FN test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN
        test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN test_castlike_FLOAT16_to_FLOAT8E4M3FN
        test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded test_castlike_FLOAT8E4M3FN_to_FLOAT
        test_castlike_FLOAT8E4M3FN_to_FLOAT16 test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded
        test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded test_castlike_FLOAT_to_FLOAT8E4M3FN
        test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN
        test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded test_dequantizelinear_e4m3fn
        test_dequantizelinear_e4m3fn_float16 test_dequantizelinear_e4m3fn_zero_point test_quantizelinear_e4m3fn
    """,
    'dtype float8e4m3fnuz has no hwadapter dtype': """
        test_cast_FLOAT16_to_FLOAT8E4M3FNUZ test_cast_FLOAT8E4M3FNUZ_to_FLOAT test_cast_FLOAT8E4M3FNUZ_to_FLOAT16
        test_cast_FLOAT_to_FLOAT8E4M3FNUZ test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ
        test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ
        test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded test_castlike_FLOAT8E4M3FNUZ_to_FLOAT
        test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16 test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded
        test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded test_castlike_FLOAT_to_FLOAT8E4M3FNUZ
        test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded
        test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded
    """,
    'dtype float8e5m2 has no hwadapter dtype': """
        test_cast_FLOAT16_to_FLOAT8E5M2 test_cast_FLOAT8E5M2_to_FLOAT test_cast_FLOAT8E5M2_to_FLOAT16
        test_cast_FLOAT_to_FLOAT8E5M2 test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2
        test_cast_no_saturate_FLOAT_to_FLOAT8E5M2 test_castlike_FLOAT16_to_FLOAT8E5M2
        test_castlike_FLOAT16_to_FLOAT8E5M2_expanded test_castlike_FLOAT8E5M2_to_FLOAT
        test_castlike_FLOAT8E5M2_to_FLOAT16 test_castlike_FLOAT8E5M2_to_FLOAT16_expanded
        test_castlike_FLOAT8E5M2_to_FLOAT_expanded test_castlike_FLOAT_to_FLOAT8E5M2
        test_castlike_FLOAT_to_FLOAT8E5M2_expanded test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2
        test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded test_dequantizelinear_e5m2 test_quantizelinear_e5m2
    """,
    'dtype float8e5m2fnuz has no hwadapter dtype': """
        test_cast_FLOAT16_to_FLOAT8E5M2FNUZ test_cast_FLOAT8E5M2FNUZ_to_FLOAT test_cast_FLOAT8E5M2FNUZ_to_FLOAT16
        test_cast_FLOAT_to_FLOAT8E5M2FNUZ test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ
        test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ
        test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded test_castlike_FLOAT8E5M2FNUZ_to_FLOAT
        test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16 test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded
        test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded test_castlike_FLOAT_to_FLOAT8E5M2FNUZ
        test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded
        test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded
    """,
    'dtype float8e8m0 has no hwadapter dtype': """
        test_cast_e8m0_FLOAT16_to_FLOAT8E8M0 test_cast_e8m0_FLOAT8E8M0_to_FLOAT test_cast_e8m0_FLOAT8E8M0_to_FLOAT16
        test_cast_e8m0_FLOAT_to_FLOAT8E8M0
    """,
    'dtype int2 has no hwadapter dtype': """
        test_cast_FLOAT16_to_INT2 test_cast_FLOAT_to_INT2 test_cast_INT2_to_FLOAT test_cast_INT2_to_FLOAT16
        test_cast_INT2_to_INT8 test_castlike_FLOAT16_to_INT2 test_castlike_FLOAT16_to_INT2_expanded
        test_castlike_FLOAT_to_INT2 test_castlike_FLOAT_to_INT2_expanded test_castlike_INT2_to_FLOAT
        test_castlike_INT2_to_FLOAT16 test_castlike_INT2_to_FLOAT16_expanded test_castlike_INT2_to_FLOAT_expanded
        test_castlike_INT2_to_INT8 test_castlike_INT2_to_INT8_expanded test_dequantizelinear_int2
        test_quantizelinear_int2
    """,
    'dtype int4 has no hwadapter dtype': """
        test_cast_FLOAT16_to_INT4 test_cast_FLOAT_to_INT4 test_cast_INT4_to_FLOAT test_cast_INT4_to_FLOAT16
        test_cast_INT4_to_INT8 test_castlike_FLOAT16_to_INT4 test_castlike_FLOAT16_to_INT4_expanded
        test_castlike_FLOAT_to_INT4 test_castlike_FLOAT_to_INT4_expanded test_castlike_INT4_to_FLOAT
        test_castlike_INT4_to_FLOAT16 test_castlike_INT4_to_FLOAT16_expanded test_castlike_INT4_to_FLOAT_expanded
        test_castlike_INT4_to_INT8 test_castlike_INT4_to_INT8_expanded test_dequantizelinear_int4
        test_quantizelinear_int4
    """,
    'dtype string has no hwadapter dtype': """
        test_equal_string test_equal_string_broadcast
    """,
    'dtype uint2 has no hwadapter dtype': """
        test_cast_FLOAT16_to_UINT2 test_cast_FLOAT_to_UINT2 test_cast_UINT2_to_FLOAT test_cast_UINT2_to_FLOAT16
        test_cast_UINT2_to_UINT8 test_castlike_FLOAT16_to_UINT2 test_castlike_FLOAT16_to_UINT2_expanded
        test_castlike_FLOAT_to_UINT2 test_castlike_FLOAT_to_UINT2_expanded test_castlike_UINT2_to_FLOAT
        test_castlike_UINT2_to_FLOAT16 test_castlike_UINT2_to_FLOAT16_expanded test_castlike_UINT2_to_FLOAT_expanded
        test_castlike_UINT2_to_UINT8 test_castlike_UINT2_to_UINT8_expanded test_dequantizelinear_uint2
        test_quantizelinear_uint2
    """,
    'dtype uint4 has no hwadapter dtype': """
        test_cast_FLOAT16_to_UINT4 test_cast_FLOAT_to_UINT4 test_cast_UINT4_to_FLOAT test_cast_UINT4_to_FLOAT16
        test_cast_UINT4_to_UINT8 test_castlike_FLOAT16_to_UINT4 test_castlike_FLOAT16_to_UINT4_expanded
        test_castlike_FLOAT_to_UINT4 test_castlike_FLOAT_to_UINT4_expanded test_castlike_UINT4_to_FLOAT
        test_castlike_UINT4_to_FLOAT16 test_castlike_UINT4_to_FLOAT16_expanded test_castlike_UINT4_to_FLOAT_expanded
        test_castlike_UINT4_to_UINT8 test_castlike_UINT4_to_UINT8_expanded test_dequantizelinear_uint4
        test_quantizelinear_uint4
    """,
    'op AffineGrid: no converter: sampling grids (spatial transformers) are not implemented': """
        test_affine_grid_2d test_affine_grid_2d_align_corners test_affine_grid_3d test_affine_grid_3d_align_corners
    """,
    ('op ArrayFeatureExtractor (domain ai.onnx.ml): hwadapter converts only the default onnx domain and '
     "ai.onnx.preview.training's optimizers, not ai.onnx.ml"): """
        test_ai_onnx_ml_array_feature_extractor
    """,
    ('op AveragePool: its input has 5 axes (3 spatial); hwadapter converts 1-D and 2-D AveragePool only '
     '(N, C, L) or (N, C, H, W)'): """
        test_averagepool_3d_default test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False
        test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True
        test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False
        test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True
        test_averagepool_3d_dilations_small
    """,
    "op Bernoulli: random numbers: hwadapter has no random generator matching onnx's": """
        test_bernoulli test_bernoulli_double test_bernoulli_seed
    """,
    ('op Binarizer (domain ai.onnx.ml): hwadapter converts only the default onnx domain and '
     "ai.onnx.preview.training's optimizers, not ai.onnx.ml"): """
        test_ai_onnx_ml_binarizer
    """,
    'op BitCast: reinterpreting bits across dtypes is not converted': """
        test_bitcast_2d_float32_to_int32 test_bitcast_bool_to_uint8 test_bitcast_float32_to_int32
        test_bitcast_float64_to_int64 test_bitcast_int32_to_float32 test_bitcast_int64_to_float64
        test_bitcast_int8_to_uint8 test_bitcast_scalar_float32_to_int32 test_bitcast_uint16_to_int16
        test_bitcast_uint32_to_int32
    """,
    'op BlackmanWindow: signal processing (complex values, windows) is not converted': """
        test_blackmanwindow test_blackmanwindow_symmetric
    """,
    'op CausalConvWithState: an op of opset 23 or newer that no converter implements yet': """
        test_causal_conv_with_state_b1_c1_degenerate test_causal_conv_with_state_basic
        test_causal_conv_with_state_decode_step test_causal_conv_with_state_fp16
        test_causal_conv_with_state_kernel_size_one test_causal_conv_with_state_short_input_no_past_state
        test_causal_conv_with_state_silu test_causal_conv_with_state_silu_fp16
        test_causal_conv_with_state_silu_with_past_state test_causal_conv_with_state_swish_alias
        test_causal_conv_with_state_with_bias test_causal_conv_with_state_with_bias_and_past_state
        test_causal_conv_with_state_with_past_state
    """,
    'op Col2Im: no converter: hwadapter has no col2im (patch folding) primitive': """
        test_col2im test_col2im_5d test_col2im_dilations test_col2im_pads test_col2im_strides
    """,
    ("op Compress: data-dependent output shape: its result's shape depends on its input's values (its "
     'condition and input must be constant)'): """
        test_compress_0 test_compress_1 test_compress_default_axis test_compress_negative_axis
    """,
    ('op ConvTranspose: its input has 5 axes (3 spatial); hwadapter converts 1-D and 2-D ConvTranspose '
     'only (N, C, L) or (N, C, H, W)'): """
        test_convtranspose_3d
    """,
    'op DeformConv: no converter: deformable convolution samples at data-dependent offsets': """
        test_basic_deform_conv_with_padding test_basic_deform_conv_without_padding test_deform_conv_with_mask_bias
        test_deform_conv_with_multiple_offset_groups
    """,
    'op Det: no converter: a determinant needs an LU factorisation, which hwadapter has no primitive for': """
        test_det_2d test_det_nd
    """,
    'op DFT: signal processing (complex values, windows) is not converted': """
        test_dft test_dft_axis test_dft_axis_opset19 test_dft_inverse test_dft_inverse_opset19 test_dft_irfft
        test_dft_irfft_opset19 test_dft_opset19 test_dft_rfft test_dft_rfft_opset19
    """,
    ("op Dropout: training_mode=True with a non-zero ratio drops at random, and hwadapter has no random "
     "generator matching onnx's"): """
        test_training_dropout test_training_dropout_default test_training_dropout_default_mask
        test_training_dropout_mask
    """,
    ('op FlexAttention (domain ai.onnx.preview): hwadapter converts only the default onnx domain and '
     "ai.onnx.preview.training's optimizers, not ai.onnx.preview"): """
        test_flexattention test_flexattention_causal_mask test_flexattention_diff_head_sizes
        test_flexattention_double test_flexattention_fp16 test_flexattention_gqa test_flexattention_prob_mod
        test_flexattention_relative_positional test_flexattention_scaled test_flexattention_score_mod
        test_flexattention_soft_cap
    """,
    'op HammingWindow: signal processing (complex values, windows) is not converted': """
        test_hammingwindow test_hammingwindow_symmetric
    """,
    'op HannWindow: signal processing (complex values, windows) is not converted': """
        test_hannwindow test_hannwindow_symmetric
    """,
    'op ImageDecoder: image decoding (encoded bytes in, pixels out) is not a tensor op': """
        test_image_decoder_decode_bmp_rgb test_image_decoder_decode_jpeg2k_rgb test_image_decoder_decode_jpeg_bgr
        test_image_decoder_decode_jpeg_grayscale test_image_decoder_decode_jpeg_rgb
        test_image_decoder_decode_png_rgb test_image_decoder_decode_pnm_rgb test_image_decoder_decode_tiff_rgb
        test_image_decoder_decode_webp_rgb
    """,
    ('op LabelEncoder (domain ai.onnx.ml): hwadapter converts only the default onnx domain and '
     "ai.onnx.preview.training's optimizers, not ai.onnx.ml"): """
        test_ai_onnx_ml_label_encoder_string_int test_ai_onnx_ml_label_encoder_string_int_no_default
        test_ai_onnx_ml_label_encoder_tensor_mapping test_ai_onnx_ml_label_encoder_tensor_value_only_mapping
    """,
    'op LinearAttention: an op of opset 23 or newer that no converter implements yet': """
        test_linear_attention_decode_step test_linear_attention_delta test_linear_attention_explicit_scale
        test_linear_attention_fp16 test_linear_attention_gated test_linear_attention_gated_delta
        test_linear_attention_gated_delta_beta_scalar test_linear_attention_gated_delta_gqa
        test_linear_attention_gated_delta_mqa test_linear_attention_gated_per_head_decay
        test_linear_attention_linear test_linear_attention_linear_t1_no_past
        test_linear_attention_no_past_explicit_zeros test_linear_attention_prefill_with_past
    """,
    ('op LpPool: its input has 5 axes (3 spatial); hwadapter converts 1-D and 2-D LpPool only (N, C, L) or '
     '(N, C, H, W)'): """
        test_lppool_3d_default
    """,
    ('op MaxPool: its input has 5 axes (3 spatial); hwadapter converts 1-D and 2-D MaxPool only (N, C, L) '
     'or (N, C, H, W)'): """
        test_maxpool_3d_default test_maxpool_3d_dilations test_maxpool_3d_dilations_use_ref_impl
        test_maxpool_3d_dilations_use_ref_impl_large
    """,
    'op MelWeightMatrix: signal processing (complex values, windows) is not converted': """
        test_melweightmatrix
    """,
    ('op NonMaxSuppression: its output shape depends on the input values, and hwadapter graphs have static '
     'shapes'): """
        test_nonmaxsuppression_center_point_box_format test_nonmaxsuppression_flipped_coordinates
        test_nonmaxsuppression_identical_boxes test_nonmaxsuppression_iou_threshold_boundary
        test_nonmaxsuppression_limit_output_size test_nonmaxsuppression_single_box
        test_nonmaxsuppression_suppress_by_IOU test_nonmaxsuppression_suppress_by_IOU_and_scores
        test_nonmaxsuppression_two_batches test_nonmaxsuppression_two_classes
    """,
    ("op NonZero: data-dependent output shape: its result's shape depends on its input's values (its input "
     'must be constant)'): """
        test_nonzero_example
    """,
    "op RandomUniformLike: random numbers: hwadapter has no random generator matching onnx's": """
        test_bernoulli_double_expanded test_bernoulli_expanded test_bernoulli_seed_expanded
    """,
    'op RegexFullMatch: strings have no hwadapter dtype': """
        test_regex_full_match_basic test_regex_full_match_email_domain test_regex_full_match_empty
    """,
    'op RoiAlign: no converter: regions of interest are sampled at data-dependent positions': """
        test_roialign_aligned_false test_roialign_aligned_true test_roialign_mode_max
    """,
    'op STFT: signal processing (complex values, windows) is not converted': """
        test_stft test_stft_with_window
    """,
    'op StringConcat: strings have no hwadapter dtype': """
        test_string_concat test_string_concat_broadcasting test_string_concat_empty_string test_string_concat_utf8
        test_string_concat_zero_dimensional
    """,
    'op StringNormalizer: strings have no hwadapter dtype': """
        test_strnormalizer_export_monday_casesensintive_lower
        test_strnormalizer_export_monday_casesensintive_nochangecase
        test_strnormalizer_export_monday_casesensintive_upper test_strnormalizer_export_monday_empty_output
        test_strnormalizer_export_monday_insensintive_upper_twodim test_strnormalizer_nostopwords_nochangecase
    """,
    'op StringSplit: strings have no hwadapter dtype': """
        test_string_split_basic test_string_split_consecutive_delimiters test_string_split_empty_string_delimiter
        test_string_split_empty_tensor test_string_split_maxsplit test_string_split_no_delimiter
    """,
    'op SwiGLU: an op of opset 23 or newer that no converter implements yet': """
        test_swiglu test_swiglu_alpha test_swiglu_float16
    """,
    'op TensorScatter: an op of opset 23 or newer that no converter implements yet': """
        test_tensorscatter test_tensorscatter_3d test_tensorscatter_circular
    """,
    'op TfIdfVectorizer: n-gram counting is not converted (no hwadapter primitive for it)': """
        test_tfidfvectorizer_tf_batch_onlybigrams_skip0 test_tfidfvectorizer_tf_batch_onlybigrams_skip5
        test_tfidfvectorizer_tf_batch_uniandbigrams_skip5 test_tfidfvectorizer_tf_only_bigrams_skip0
        test_tfidfvectorizer_tf_onlybigrams_levelempty test_tfidfvectorizer_tf_onlybigrams_skip5
        test_tfidfvectorizer_tf_uniandbigrams_skip5
    """,
    ('op TreeEnsemble (domain ai.onnx.ml): hwadapter converts only the default onnx domain and '
     "ai.onnx.preview.training's optimizers, not ai.onnx.ml"): """
        test_ai_onnx_ml_tree_ensemble_set_membership test_ai_onnx_ml_tree_ensemble_single_tree
    """,
    ("op Unique: data-dependent output shape: its result's shape depends on its input's values (its input "
     'must be constant)'): """
        test_unique_length_1 test_unique_not_sorted_without_axis test_unique_sorted_with_axis
        test_unique_sorted_with_axis_3d test_unique_sorted_with_negative_axis test_unique_sorted_without_axis
    """,
}

#: case name -> why it is skipped.
SKIPS: dict[str, str] = {name: reason for reason, names in GROUPS.items() for name in names.split()}
