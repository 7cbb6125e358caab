"""Writes the PyInstaller version resource for Amber.exe (file properties in Explorer).

    python packaging/windows/version_info.py VERSION OUT_FILE
"""
from __future__ import annotations

import sys
from pathlib import Path

TEMPLATE = """VSVersionInfo(
  ffi=FixedFileInfo(filevers={t}, prodvers={t}, mask=0x3f, flags=0x0, OS=0x40004, fileType=0x1,
                    subtype=0x0, date=(0, 0)),
  kids=[
    StringFileInfo([StringTable('040904B0', [
      StringStruct('CompanyName', 'Amber developers'),
      StringStruct('FileDescription', 'Amber'),
      StringStruct('FileVersion', '{v}'),
      StringStruct('InternalName', 'Amber'),
      StringStruct('LegalCopyright', 'Apache-2.0'),
      StringStruct('OriginalFilename', 'Amber.exe'),
      StringStruct('ProductName', 'Amber'),
      StringStruct('ProductVersion', '{v}')])]),
    VarFileInfo([VarStruct('Translation', [1033, 1200])])
  ]
)
"""


def main(version: str, out: Path) -> None:
    nums = [int("".join(c for c in part if c.isdigit()) or 0) for part in version.split(".")[:4]]
    nums += [0] * (4 - len(nums))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(TEMPLATE.format(t=tuple(nums), v=version), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
