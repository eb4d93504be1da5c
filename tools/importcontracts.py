"""An allow-list contract for import-linter (.importlinter registers it as `allowed`).

A module under source_modules may import only: the standard library, modules under
source_modules, and modules under allowed_modules (internal or external packages). Whatever
is new and not listed is refused, unlike a `forbidden` contract's deny-list.
"""

from __future__ import annotations

import sys

from importlinter import Contract, ContractCheck, fields, output


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


class AllowedContract(Contract):
    """Configuration: source_modules (packages), allowed_modules (packages)."""

    type_name = "allowed"

    source_modules = fields.ListField(subfield=fields.StringField())
    allowed_modules = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph, verbose: bool) -> ContractCheck:
        sources = list(self.source_modules)  # type: ignore[arg-type]
        allowed = [*sources, *(self.allowed_modules or ())]  # type: ignore[misc]
        importers = sorted(m for m in graph.modules if _under(m, sources))
        illegal = []
        for importer in importers:
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                top = imported.split(".")[0]
                if _under(imported, allowed) or top in sys.stdlib_module_names:
                    continue
                lines = tuple(
                    d["line_number"]
                    for d in graph.get_import_details(importer=importer, imported=imported)
                )
                illegal.append((importer, imported, lines))
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["illegal"]:
            where = ", ".join(f"l.{n}" for n in lines)
            output.print_error(f"{importer} -> {imported} ({where}): not allowed")
            output.new_line()
