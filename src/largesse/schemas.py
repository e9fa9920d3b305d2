"""Types shared by the wire schemas of every domain."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def Text(max_length: int = 1000, min_length: int = 0):  # noqa: N802 - reads as a type
    """A strict JSON string of bounded length without NUL (PostgreSQL cannot store NUL)."""
    return Annotated[
        str,
        StringConstraints(strict=True, max_length=max_length, min_length=min_length),
        AfterValidator(_no_nul),
    ]


Name = Text(200)
Id = Text(64, 1)


class Wire(BaseModel):
    """Request bodies: unknown keys are ignored (as the reference API does), types are strict."""

    model_config = ConfigDict(extra="ignore", strict=True)


class Out(BaseModel):
    """Response models, used for the OpenAPI document; responses are serialized with orjson."""

    model_config = ConfigDict(extra="allow")
