"""Importing a GGUF file that is imported already: noticed before converting (same file, whatever
its name now; or an older import by its recorded name and size), said in the window with a way to
use the model, and nothing converted again; a different file of the same name is imported."""
from __future__ import annotations

import shutil
from dataclasses import replace

from app.gui.backend import import_gguf, list_models
from app.gui.import_source import SOURCE_FILE
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf


def imported(qtbot, w, src, *, expect: str, gguf: bool = True) -> None:
    w.status.set_message("")
    w.import_model(src, gguf=gguf)
    qtbot.waitUntil(lambda: w.status.message.text().startswith(expect), timeout=30000)


def test_the_same_gguf_twice_is_noticed_not_converted_again(qtbot, make_window, engine, home, tmp_path):
    src = write_tiny_gguf(tmp_path / "tiny.gguf").path
    w = make_window(engine, model_lister=list_models, gguf_importer=import_gguf)
    models = home / "models"
    imported(qtbot, w, src, expect="Imported tiny")
    assert (models / "tiny" / "model.onnx").is_file() and (models / "tiny" / SOURCE_FILE).is_file()
    qtbot.waitUntil(lambda: w.model_picker.findData("tiny") >= 0)

    # again, and again under another name: said, offered, not converted
    renamed = tmp_path / "elsewhere" / "my-copy.gguf"
    renamed.parent.mkdir()
    shutil.copyfile(src, renamed)
    for again in (src, renamed):
        imported(qtbot, w, again, expect=f"{again.name} is already imported as “tiny”")
        box = w.duplicate_box
        assert box is not None and box.isVisible()
        assert "nothing was imported again" in box.text()
        box.close()
    assert sorted(p.name for p in models.iterdir()) == ["tiny"]

    # a different model in a file of the same name is a new import
    (tmp_path / "other").mkdir()
    other = write_tiny_gguf(tmp_path / "other" / "tiny.gguf", replace(TinyConfig(), seed=7)).path
    imported(qtbot, w, other, expect="Imported tiny-2")
    assert sorted(p.name for p in models.iterdir()) == ["tiny", "tiny-2"]

    # an import made before fingerprints were kept: known by the converter's report
    (models / "tiny" / SOURCE_FILE).unlink()
    imported(qtbot, w, src, expect="tiny.gguf is already imported as “tiny”")

    # "Use tiny": the model is picked (saying what switching costs first)
    asked = []
    w.confirm_switch = lambda title, text: asked.append(text) or True
    imported(qtbot, w, src, expect="tiny.gguf is already imported as “tiny”")
    use = [b for b in w.duplicate_box.buttons() if b.text() == "Use tiny"]
    with qtbot.waitSignal(w.engineReady, timeout=30000):
        use[0].click()
    assert w.settings.model == "tiny" and asked and "Switching to tiny unloads" in asked[0]


def test_the_same_onnx_folder_twice_is_noticed(qtbot, make_window, engine, home, tmp_path):
    from engine.convert import convert_gguf
    folder = convert_gguf(write_tiny_gguf(tmp_path / "tiny.gguf").path, tmp_path / "Tiny-ONNX")
    w = make_window(engine, model_lister=list_models)
    imported(qtbot, w, folder, expect="Imported Tiny-ONNX", gguf=False)
    imported(qtbot, w, folder, expect="Tiny-ONNX is already imported as “Tiny-ONNX”", gguf=False)
    assert "nothing was imported again" in w.duplicate_box.text()
    assert sorted(p.name for p in (home / "models").iterdir()) == ["Tiny-ONNX"]
