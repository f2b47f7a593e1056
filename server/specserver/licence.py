"""The licence of the public data, named once: the API's headers and docs, every export,
the signed snapshots' manifests, the page's footer and the README read it from here.

Creative Commons Attribution 4.0: anyone may copy, analyse and republish the results,
commercially too, crediting specatlas and its contributors. Contributors' results are
public by design (their keys are pseudonyms; nothing identifying is collected), and
attribution is what keeps a figure traceable to the crowd that measured it.
"""

from __future__ import annotations

LICENCE_ID = "CC-BY-4.0"  # its SPDX identifier
LICENCE_NAME = "CC BY 4.0"
LICENCE_URL = "https://creativecommons.org/licenses/by/4.0/"
ATTRIBUTION = "specatlas contributors"
# RFC 8288's registered "license" relation: on every public GET and export.
LINK_HEADER = f'<{LICENCE_URL}>; rel="license"'
SENTENCE = (f"The public data is licensed {LICENCE_NAME} ({LICENCE_URL}): credit "
            f"\"{ATTRIBUTION}\".")
