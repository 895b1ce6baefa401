"""The baseline: a bare msgspec decode-and-encode loop over the same lines, no mapping."""

import sys

import msgspec

decode = msgspec.json.Decoder().decode
encode = msgspec.json.Encoder().encode


def main() -> None:
    out = sys.stdout.buffer
    with open(sys.argv[1], "rb") as f:
        for line in f:
            if line.strip():
                out.write(encode(decode(line)) + b"\n")


if __name__ == "__main__":
    main()
