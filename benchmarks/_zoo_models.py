"""The benchmark zoo's recipes (issue 26): today's model families built from the model definitions of `transformers`
(pure Python: a config and random weights from a fixed seed, nothing downloaded), in eval mode at batch 1, and
exported to ONNX with torch.onnx.export.

    recipe = RECIPES["vit_b16"]
    model, inputs = recipe.build("full")                # or "tiny": the tests' small version
    proto = export(model, inputs, recipe.outputs)       # an onnx ModelProto, checked by onnx.checker

benchmarks/zoo.py times the "full" models against onnxruntime; tests/test_zoo.py runs the "tiny" ones (imported by
path). Needs torch and transformers (the `bench` and `test` extras).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import warnings
from typing import Callable

SEED = 0
RECIPE_VERSION = 1  # raise it when build() changes what it makes: the cached models' key includes it
# The legacy TorchScript exporter (dynamo=False): it needs no onnxscript and, with constant folding, writes plain
# graphs of standard ops (no functions, no dynamic axes: every shape is the example's).
EXPORT = {"opset_version": 17, "do_constant_folding": True, "dynamo": False}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One zoo model: its family, what it runs on, and how to make its config and inputs per size."""
    name: str
    family: str
    what: str
    config: Callable  # size -> transformers config
    model: str  # the transformers class
    inputs: Callable  # (size, config, torch.Generator) -> {name: tensor}
    outputs: tuple  # the output names kept (the model's outputs, in order, return_dict=False)

    def build(self, size: str = "full"):
        """(torch model in eval mode, {input name: tensor}): random weights and inputs from SEED."""
        import torch
        import transformers
        torch.manual_seed(SEED)
        config = self.config(size)
        model = getattr(transformers, self.model)(config).eval()
        gen = torch.Generator().manual_seed(SEED)
        inputs = self.inputs(size, config, gen)  # first from gen: example() makes the same
        _calibrate_batch_norm(model, inputs, gen)
        return _outputs_module()(model, list(inputs), len(self.outputs)).eval(), inputs

    def example(self, size: str = "full") -> dict:
        """{input name: tensor}: the inputs build() makes, without building the model."""
        import torch
        return self.inputs(size, self.config(size), torch.Generator().manual_seed(SEED))

    def key(self, size: str = "full") -> str:
        """A hash of what the exported model depends on: the config, the inputs' shapes, the versions of
        transformers and torch, the export settings and the seed. A changed recipe gets a new key."""
        import torch
        import transformers
        config = self.config(size)
        shapes = {k: (tuple(v.shape), str(v.dtype)) for k, v in self.example(size).items()}
        text = json.dumps({"config": config.to_dict(), "class": self.model, "inputs": shapes, "outputs": self.outputs,
                           "transformers": transformers.__version__, "torch": torch.__version__, "export": EXPORT,
                           "seed": SEED, "recipe": RECIPE_VERSION}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def _outputs_module():
    import torch

    class Outputs(torch.nn.Module):
        """The model called with its inputs by name (the tracer passes them in order), its first `keep` outputs as a
        tuple (no dicts, no caches)."""

        def __init__(self, model, names: list, keep: int):
            super().__init__()
            self.model, self.names, self.keep = model, names, keep

        def forward(self, *args):
            return tuple(self.model(**dict(zip(self.names, args)), return_dict=False)[:self.keep])
    return Outputs


def _calibrate_batch_norm(model, inputs: dict, gen) -> None:
    """Batch norm's scale drawn from U(0.5, 1.5), its shift from N(0, 0.1), and its running statistics set to those
    of a batch of 4 random inputs like the example's. Random weights with the initial statistics (mean 0, variance
    1) shrink a deep CNN's activations layer by layer until the logits are ~1e-25 (MobileNetV2's; EfficientNet's
    init also draws the scale from N(0, 0.02)): every result then equals every other within any tolerance. The
    models with batch norm are the image ones: their inputs are float pixels."""
    import torch
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    with torch.no_grad():
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: after one batch, its statistics
            if m.affine:
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
    batch = {k: torch.randn((4, *v.shape[1:]), generator=gen, dtype=v.dtype) for k, v in inputs.items()}
    model.train()
    with torch.no_grad():
        model(**batch)
    model.eval()


def _eager(config):
    """Attention as its plain ops (MatMul, Softmax, MatMul), not torch's fused scaled_dot_product_attention."""
    config._attn_implementation = "eager"
    return config


def _image(size_px):
    def inputs(size, config, gen):
        import torch
        px = size_px[size]
        return {"pixel_values": torch.randn(1, config.num_channels, px, px, generator=gen)}
    return inputs


def _tokens(seq, mask: bool):
    def inputs(size, config, gen):
        import torch
        ids = torch.randint(0, config.vocab_size, (1, seq[size]), generator=gen, dtype=torch.int64)
        out = {"input_ids": ids}
        if mask:
            out["attention_mask"] = torch.ones_like(ids)
        return out
    return inputs


def _mobilenet_v2(size):
    import transformers as T
    if size == "full":
        return T.MobileNetV2Config(num_labels=1000)
    return T.MobileNetV2Config(num_labels=10, image_size=32, depth_multiplier=0.35, min_depth=8)


def _efficientnet_b0(size):
    import transformers as T
    # the config's defaults are B7's (width 2.0, depth 3.1, 600 px); B0 is width 1.0, depth 1.0 at 224
    if size == "full":
        return T.EfficientNetConfig(num_labels=1000, width_coefficient=1.0, depth_coefficient=1.0, image_size=224,
                                    dropout_rate=0.2, hidden_dim=1280)
    # hidden_dim: the top conv's channels, round_filters(1280) at this width (the model does not derive it)
    return T.EfficientNetConfig(num_labels=10, width_coefficient=0.25, depth_coefficient=0.25, image_size=32,
                                hidden_dim=320)


def _convnext_tiny(size):
    import transformers as T
    # layer scale starts at 0.1, not 1e-6: at 1e-6 the residual branches (the convolutions) hardly touch the output,
    # and a wrong convolution would pass the check (the graph is the same: a Mul by a learned vector)
    if size == "full":
        return T.ConvNextConfig(num_labels=1000, layer_scale_init_value=0.1)
    return T.ConvNextConfig(num_labels=10, image_size=32, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                            layer_scale_init_value=0.1)


def _vit_b16(size):
    import transformers as T
    if size == "full":
        return _eager(T.ViTConfig(num_labels=1000))
    return _eager(T.ViTConfig(num_labels=10, image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=128))


def _bert_base(size):
    import transformers as T
    if size == "full":
        return _eager(T.BertConfig())
    return _eager(T.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128, max_position_embeddings=64))


def _gpt2(size):
    import transformers as T
    if size == "full":
        return _eager(T.GPT2Config(use_cache=False))
    return _eager(T.GPT2Config(use_cache=False, vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                               bos_token_id=511, eos_token_id=511))


def _segformer_b0(size):
    import transformers as T
    # the config's defaults are MiT-b0's; 150 labels: ADE20K's
    if size == "full":
        return _eager(T.SegformerConfig(num_labels=150))
    return _eager(T.SegformerConfig(num_labels=10, hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2,
                                    sr_ratios=[2, 1], num_attention_heads=[1, 2], patch_sizes=[7, 3],
                                    strides=[4, 2], mlp_ratios=[2, 2], decoder_hidden_size=32))


IMAGE = {"full": 224, "tiny": 32}
SEQ = {"full": 128, "tiny": 16}
SEGFORMER_PX = {"full": 512, "tiny": 64}

RECIPES = {r.name: r for r in [
    Recipe("mobilenet_v2", "depthwise CNN", "MobileNetV2 1.0, 224x224, 1000 classes", _mobilenet_v2,
           "MobileNetV2ForImageClassification", _image(IMAGE), ("logits",)),
    Recipe("efficientnet_b0", "depthwise CNN", "EfficientNet-B0, 224x224, 1000 classes", _efficientnet_b0,
           "EfficientNetForImageClassification", _image(IMAGE), ("logits",)),
    Recipe("convnext_tiny", "large-kernel CNN", "ConvNeXt-Tiny (7x7 depthwise), 224x224, 1000 classes",
           _convnext_tiny, "ConvNextForImageClassification", _image(IMAGE), ("logits",)),
    Recipe("vit_b16", "vision transformer", "ViT-B/16, 224x224, 1000 classes", _vit_b16, "ViTForImageClassification",
           _image(IMAGE), ("logits",)),
    Recipe("bert_base", "encoder (BERT)", "BERT-base, 128 tokens, attention mask of ones", _bert_base,
           "BertModel", _tokens(SEQ, mask=True), ("last_hidden_state", "pooler_output")),
    # the attention mask (ones) as optimum's GPT-2 exports take it; without one, transformers looks for packed
    # sequences in the position ids with torch.diff, which the exporter does not take
    Recipe("gpt2", "decoder (GPT)", "GPT-2 small with its LM head, 128 tokens, attention mask of ones, no cache",
           _gpt2, "GPT2LMHeadModel", _tokens(SEQ, mask=True), ("logits",)),
    Recipe("segformer_b0", "segmentation", "SegFormer-B0 (MiT-b0 + all-MLP head), 512x512, 150 classes",
           _segformer_b0, "SegformerForSemanticSegmentation", _image(SEGFORMER_PX), ("logits",)),
]}


def export(model, inputs: dict, outputs=None):
    """The model exported to an onnx ModelProto (EXPORT's settings, inputs named as given, outputs named `outputs`),
    checked by onnx.checker."""
    import onnx
    import torch
    names = list(inputs)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's and the legacy exporter's notes, shown for every model
        torch.onnx.export(model, tuple(inputs.values()), buf, input_names=names,
                          output_names=list(outputs or ()) or None, **EXPORT)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto)
    return proto


def feeds(inputs: dict) -> dict:
    """The inputs as numpy arrays, as onnxruntime and hwadapter take them."""
    return {k: v.numpy() for k, v in inputs.items()}
