"""The page: a Gradio tab per run, laid out by the run's task. Each tab's button calls `runs.predict` on the
server's worker pool, exactly as the API does, and shows the JSON's pictures; a refusal shows its message.

A layout is a function `layout(run, answer)` that builds the tab's widgets, registered in PAGES under the name a
task gives as its `page` (`@register_page("boxes")`); vitlab's are below, a task from elsewhere registers its own.
A task that names none gets the generic page: an image input where it needs one, a widget per option of its
ServeOptions (uploads as image inputs), the answer's pictures and its JSON."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from typing import Any

import gradio as gr
from PIL import Image

from ..registry import Registry
from .pool import WorkerPool
from .runs import ServedRun, decode_picture, field_types, predict, uploads_of
from .uploads import BadInput, ImageLimits, checked

# the page's layouts, by the name a task gives as its `page`
PAGES: Registry[Callable[[ServedRun, Callable], None]] = Registry("page layout")


def register_page(name: str) -> Callable:
    """Decorator of a layout `layout(run, answer)`: the tab of every run whose task's `page` is `name`."""
    def register(layout: Callable[[ServedRun, Callable], None]) -> Callable:
        return PAGES.register(name, layout)

    return register


def build_page(runs: list[ServedRun], pool: WorkerPool, limits: ImageLimits) -> gr.Blocks:
    def answer(run: ServedRun, image: Image.Image | None, **options: Any) -> dict[str, Any]:
        try:
            if image is not None:  # opened by the page, not decoded yet: a damaged file is said here, as by the API
                image = checked(image, "image", limits)
            for name in uploads_of(run.task):
                if options.get(name) is not None:
                    options[name] = checked(options[name], name, limits)
            return pool.run_blocking(predict, run, image, "upload.png", **options)
        except BadInput as error:
            raise gr.Error(str(error)) from None

    with gr.Blocks(title="vitlab", analytics_enabled=False) as page:
        gr.Markdown(f"# vitlab\n{len(runs)} trained run(s). Each tab is one run; the same predictions are an "
                    f"HTTP API: [`/docs`](/docs).")
        with gr.Tabs():
            for run in runs:
                with gr.Tab(f"{run.name} · {run.kind}", id=run.name, elem_id=f"tab-{run.name}"):
                    (PAGES[run.task.page] if run.task.page else generic_page)(run, answer)
    return page


def _image_input(run: ServedRun, label: str = "image", key: str = "image") -> gr.Image:
    """An upload, kept in its own mode (the task converts it as `vitlab predict` does); #RUN-KEY in the page."""
    return gr.Image(type="pil", image_mode=None, label=label, sources=["upload", "clipboard"], height=260,
                    elem_id=f"{run.name}-{key}")


def _output_image(run: ServedRun, label: str) -> gr.Image:
    """The tab's main picture, #RUN-output in the page."""
    return gr.Image(label=label, interactive=False, height=360, elem_id=f"{run.name}-output")


def _examples(run: ServedRun, image: gr.Image) -> None:
    if run.examples:
        gr.Examples([[str(path)] for path in run.examples], inputs=[image], label="examples: click one to try it")


def _picture(text: str) -> Image.Image:
    return decode_picture(text).convert("RGB")


def _enlarged(picture: Image.Image, min_side: int = 256, max_side: int = 1200) -> Image.Image:
    """Small pictures (28-pixel garments, 32-pixel samples) shown enlarged by a whole factor, nearest neighbour, so
    that their pixels stay sharp; the API's pictures keep their own size."""
    scale = max(1, min(min_side // min(picture.size), max_side // max(picture.size)))
    return picture if scale == 1 else picture.resize((picture.width * scale, picture.height * scale),
                                                     Image.Resampling.NEAREST)


@register_page("classes")
def _classification(run: ServedRun, answer) -> None:
    with gr.Row():
        with gr.Column():
            image = _image_input(run)
            top_k = gr.Slider(1, max(1, len(run.classes)), value=min(3, max(1, len(run.classes))), step=1,
                              label="top-k classes")
            button = gr.Button("Classify", variant="primary", elem_id=f"{run.name}-run")
        with gr.Column():
            classes = gr.Label(label="classes", elem_id=f"{run.name}-classes")
            rollout = _output_image(run, "attention rollout (all layers)")
    heads = gr.Gallery(label="class-token attention of each head, last layer", columns=6, height=240,
                       object_fit="contain")
    _examples(run, image)

    def classify(picture, k):
        result = answer(run, picture, top_k=int(k), attention=True)
        probabilities = {item["class"]: item["probability"] for item in result["top_k"]}
        maps = result.get("attention")
        if maps is None:
            return probabilities, None, []
        return probabilities, _picture(maps["rollout_png"]), [_picture(h) for h in maps["heads_png"]]

    button.click(classify, [image, top_k], [classes, rollout, heads])


@register_page("boxes")
def _detection(run: ServedRun, answer) -> None:
    with gr.Row():
        with gr.Column():
            image = _image_input(run)
            threshold = gr.Slider(0.0, 0.99, value=0.5, step=0.01, label="score threshold",
                                  elem_id=f"{run.name}-threshold")
            button = gr.Button("Detect", variant="primary", elem_id=f"{run.name}-run")
        drawn = _output_image(run, "detections")
    table = gr.Dataframe(headers=["class", "score", "x0", "y0", "x1", "y1"], label="boxes (pixels)",
                         interactive=False)
    _examples(run, image)

    def detect(picture, limit):
        result = answer(run, picture, threshold=float(limit))
        rows = [[d["label"], d["score"], *d["box"]] for d in result["detections"]]
        return _picture(result["image_png"]), rows

    button.click(detect, [image, threshold], [drawn, table])


@register_page("mask")
def _segmentation(run: ServedRun, answer) -> None:
    with gr.Row():
        with gr.Column():
            image = _image_input(run)
            button = gr.Button("Segment", variant="primary", elem_id=f"{run.name}-run")
        mask = _output_image(run, "class mask")
        overlay = gr.Image(label="overlay", interactive=False)
    legend = gr.HTML(label="legend")
    _examples(run, image)

    def segment(picture):
        result = answer(run, picture)
        coloured = decode_picture(result["mask_png"]).convert("RGB")  # the palette's colours
        return (_enlarged(coloured), _enlarged(_picture(result["overlay_png"])),
                legend_html(result["legend"], result["classes"]))

    button.click(segment, [image], [mask, overlay, legend])


def legend_html(legend: list[dict[str, Any]], shares: dict[str, float]) -> str:
    """Each class's colour swatch, name and share of the image (classes absent from the image greyed)."""
    items = []
    for entry in legend:
        share = shares.get(entry["class"])
        text = f"{html.escape(entry['class'])} {share:.1%}" if share else html.escape(entry["class"])
        style = "" if share else "opacity:0.45"
        items.append(f'<span style="display:inline-block;margin:2px 10px 2px 0;{style}"><span style="display:'
                     f'inline-block;width:14px;height:14px;vertical-align:middle;border:1px solid #888;background:'
                     f'{entry["color"]}"></span> {text}</span>')
    return "<div>" + "".join(items) + "</div>"


@register_page("restored")
def _restoration(run: ServedRun, answer) -> None:
    degradations = list(run.model.degradations)
    with gr.Row():
        with gr.Column():
            image = _image_input(run)
            degradation = gr.Dropdown(degradations, value=degradations[0], label="restoration task")
            reference = _image_input(run, "clean reference (optional)", "reference")
            button = gr.Button("Restore", variant="primary", elem_id=f"{run.name}-run")
        with gr.Column():
            view = gr.ImageSlider(label="before | after", type="pil", interactive=False,
                                  elem_id=f"{run.name}-output")
            scores = gr.Markdown(elem_id=f"{run.name}-scores")
    _examples(run, image)

    def restore(picture, name, clean):
        result = answer(run, picture, degradation=name, reference=clean)
        after = _picture(result["image_png"])
        before = picture.convert("RGB").resize(after.size, Image.Resampling.BICUBIC)
        text = f"{name}: {'×'.join(map(str, result['input_size']))} → {'×'.join(map(str, result['output_size']))} " \
               f"in {result['seconds']:.2f} s"
        if "psnr_y" in result:
            text += (f"\n\n| | PSNR-Y | SSIM-Y | PSNR-RGB |\n|---|---|---|---|\n| restored | {result['psnr_y']:.2f} | "
                     f"{result['ssim_y']:.4f} | {result['psnr_rgb']:.2f} |\n| input | {result['input_psnr_y']:.2f} |"
                     f" {result['input_ssim_y']:.4f} | {result['input_psnr_rgb']:.2f} |")
        return (before, after), text

    button.click(restore, [image, degradation, reference], [view, scores])


@register_page("reconstruction")
def _vqgan(run: ServedRun, answer) -> None:
    with gr.Row():
        with gr.Column():
            image = _image_input(run)
            button = gr.Button("Reconstruct", variant="primary", elem_id=f"{run.name}-run")
        with gr.Column():
            rebuilt = _output_image(run, "input | reconstruction")
            psnr = gr.Markdown()
    _examples(run, image)

    def reconstruct(picture):
        result = answer(run, picture)
        value = "∞" if result["psnr"] in (None, float("inf")) else f"{result['psnr']:.2f}"
        rows, columns = len(result["codes"]), len(result["codes"][0])
        return _enlarged(_picture(result["image_png"])), f"PSNR {value} dB, a grid of {rows}×{columns} codes"

    button.click(reconstruct, [image], [rebuilt, psnr])


@register_page("samples")
def _prior(run: ServedRun, answer) -> None:
    with gr.Row():
        with gr.Column():
            chosen = gr.Dropdown([(name, i) for i, name in enumerate(run.classes)], value=0, label="class")
            n = gr.Slider(1, 64, value=16, step=1, label="samples")
            temperature = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="temperature")
            top_k = gr.Slider(0, run.model.config.num_codes, value=0, step=1, label="top-k (0: all codes)")
            top_p = gr.Slider(0.0, 1.0, value=1.0, step=0.01, label="top-p (1: all)")
            seed = gr.Number(0, precision=0, label="seed")
            button = gr.Button("Sample", variant="primary", elem_id=f"{run.name}-run")
        grid = _output_image(run, "samples")

    def sample(index, count, t, k, p, draw_seed):
        result = answer(run, None, class_index=int(index), n=int(count), temperature=float(t),
                        top_k=int(k) or None, top_p=float(p) if p < 1 else None, seed=int(draw_seed))
        return _enlarged(_picture(result["grid_png"]))

    button.click(sample, [chosen, n, temperature, top_k, top_p, seed], [grid])


def generic_page(run: ServedRun, answer) -> None:
    """A task without a layout of its own: an image input where it needs one, a widget per option (an upload: an
    image input), its answer's pictures (the `_png` keys) and the rest of its answer as JSON."""
    fields = {f.name: f for f in dataclasses.fields(run.task.ServeOptions)}
    types = field_types(run.task)
    with gr.Row():
        with gr.Column():
            image = _image_input(run) if run.needs_image else None
            widgets = {name: (_image_input(run, name, name) if name not in types else
                              _option_widget(run, fields[name], types[name])) for name in fields}
            button = gr.Button("Predict" if run.needs_image else "Answer", variant="primary",
                               elem_id=f"{run.name}-run")
        with gr.Column():
            pictures = gr.Gallery(label="pictures", columns=3, height=300, object_fit="contain",
                                  elem_id=f"{run.name}-pictures")
            shown = gr.JSON(label="answer", elem_id=f"{run.name}-output")
    if image is not None:
        _examples(run, image)

    def respond(*values):
        picture, values = (values[0], values[1:]) if image is not None else (None, values)
        options = {name: _option_value(value, types.get(name)) for name, value in zip(widgets, values)
                   if value is not None and value != ""}
        result = answer(run, picture, **options)
        drawn = [_picture(text) for _, text in _pictures(result)]
        return drawn, {key: value for key, value in result.items() if not key.endswith("_png")}

    button.click(respond, ([image] if image is not None else []) + list(widgets.values()), [pictures, shown])


def _option_widget(run: ServedRun, field: dataclasses.Field, kind: type) -> gr.components.Component:
    """The widget of one form field, by its type; #RUN-NAME in the page."""
    label, default = f"{field.name}: {field.metadata.get('help', '')}", field.default
    default = None if default is dataclasses.MISSING else default
    elem_id = f"{run.name}-{field.name}"
    if field.metadata.get("choices"):
        return gr.Dropdown(list(field.metadata["choices"]), value=default, label=label, elem_id=elem_id)
    if kind is bool:
        return gr.Checkbox(value=bool(default), label=label, elem_id=elem_id)
    if kind in (int, float):
        return gr.Number(value=default, precision=0 if kind is int else None, label=label, elem_id=elem_id)
    return gr.Textbox(value="" if default is None else str(default), label=label, elem_id=elem_id)


def _option_value(value: Any, kind: type | None) -> Any:
    """A widget's value as its option's type (gr.Number gives floats; an upload stays an image)."""
    if kind is int and isinstance(value, float):
        return int(value)
    return value


def _pictures(result: Any, key: str = "") -> list[tuple[str, str]]:
    """The (key, base64 PNG) of every picture in an answer, nested ones too."""
    if isinstance(result, dict):
        return [found for k, v in result.items() for found in _pictures(v, k)]
    if isinstance(result, list):
        return [found for v in result for found in _pictures(v, key)]
    return [(key, result)] if key.endswith("_png") and isinstance(result, str) else []
