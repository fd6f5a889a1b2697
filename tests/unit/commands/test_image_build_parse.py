"""`nodeagent image build`'s Containerfile subset: what it accepts, and each refusal naming the
instruction and its line (issue 18, item 4)."""

import pytest

from nodeagent.commands.image_build import BuildError, parse


def test_the_subset_parses_with_continuations_and_comments():
    text = ("# base\nFROM localhost/busybox:latest\nRUN echo a \\\n    && echo b\n\nCOPY --chown=1:1 a /a\n"
            "ADD b.tar /b\nENV A=1 B=2\nWORKDIR /w\nUSER 1000\nENTRYPOINT [\"sh\"]\nCMD [\"-c\", \"x\"]\n"
            "EXPOSE 80\nLABEL k=v\n")
    got = parse(text, "Containerfile")
    assert [(i.line, i.keyword) for i in got] == [
        (2, "FROM"), (3, "RUN"), (6, "COPY"), (7, "ADD"), (8, "ENV"), (9, "WORKDIR"), (10, "USER"),
        (11, "ENTRYPOINT"), (12, "CMD"), (13, "EXPOSE"), (14, "LABEL")]
    assert got[1].args == "echo a && echo b"


@pytest.mark.parametrize("text, message", [
    ("FROM scratch\nCOPY a /\nHEALTHCHECK CMD true\n", "Containerfile:3: HEALTHCHECK is not supported"),
    ("FROM scratch\nvolume /data\n", "Containerfile:2: VOLUME is not supported"),
    ("FROM scratch\nADD https://example.com/x.tar /\n", "Containerfile:2: ADD from a URL is not supported"),
    ("FROM scratch\nCOPY --from=build /a /a\n", "Containerfile:2: COPY --from is not supported"),
    ("FROM a AS build\n", "Containerfile:1: FROM takes one image"),
    ("FROM scratch\nFROM scratch\n", "Containerfile:2: multi-stage builds"),
    ("COPY a /\n", "Containerfile:1: the first instruction must be FROM"),
    ("FROM scratch\nRUN\n", "Containerfile:2: RUN needs arguments"),
    ("FROM scratch\nRUN echo \\\n", "Containerfile:2: the file ends inside a continued line"),
])
def test_what_is_refused_names_the_instruction_and_line(text, message):
    with pytest.raises(BuildError) as e:
        parse(text, "Containerfile")
    assert message in str(e.value)
