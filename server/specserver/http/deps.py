"""FastAPI dependencies as ``Annotated`` aliases: what a route needs from the app's state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from specserver.board import ReadService


def reads_of(request: Request) -> ReadService:
    reads: ReadService = request.app.state.reads
    return reads


Reads = Annotated[ReadService, Depends(reads_of)]
