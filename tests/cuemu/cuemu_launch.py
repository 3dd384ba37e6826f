#!/usr/bin/env python3
"""cuemu_launch.py IN OUT: rewrites every CUDA launch of IN for cuemu.

    name<T>  <<<grid, block, smem, stream>>>  (a, b, c);
becomes
    cuemu_launch("name<T>", cuemu_config(grid, block, smem, stream), name<T>, a, b, c);

Only the launch syntax changes; the rest of the file is copied, and a
#line directive keeps compiler messages pointing at IN's lines.
"""
import re
import sys


def matching(text, i, open_ch, close_ch, step):
    """Index of the bracket that closes the one at i, scanning by step."""
    depth = 0
    while 0 <= i < len(text):
        c = text[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += step
    raise SystemExit(f"cuemu_launch: unbalanced {open_ch}{close_ch}")


def rewrite(text, path):
    out, pos = [], 0
    for m in re.finditer(r"<<<", text):
        if m.start() < pos:
            continue
        # the kernel: an identifier, maybe with a template argument list
        j = m.start() - 1
        while text[j].isspace():
            j -= 1
        end_name = j + 1
        if text[j] == ">":
            j = matching(text, j, ">", "<", -1) - 1
        while j >= 0 and (text[j].isalnum() or text[j] in "_:"):
            j -= 1
        start_name = j + 1
        name = text[start_name:end_name]
        cfg_end = text.index(">>>", m.end())
        cfg = text[m.end():cfg_end]
        k = cfg_end + 3
        while text[k].isspace():
            k += 1
        if text[k] != "(":
            raise SystemExit(f"{path}: launch of {name} without an argument list")
        close = matching(text, k, "(", ")", 1)
        # NULL is an integer to a forwarding template: pass nullptr instead
        args = re.sub(r"\bNULL\b", "nullptr", text[k + 1:close].strip())
        label = " ".join(name.split())
        call = f'cuemu_launch("{label}", cuemu_config({cfg}), {name}'
        call += f", {args})" if args else ")"
        out.append(text[pos:start_name])
        # keep the line count, so that later lines keep their numbers
        out.append(call + "\n" * text[start_name:close + 1].count("\n"))
        pos = close + 1
    out.append(text[pos:])
    return "".join(out)


SMEM = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w ]+?)\s*(\w+)\[\];")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src, encoding="utf-8").read()
    body = rewrite(text, src)
    # dynamic shared memory: the launch's buffer (cuemu_dyn_smem)
    body = SMEM.sub(lambda m: f"{m.group(1)} *{m.group(2)} = ({m.group(1)} *)cuemu_dyn_smem;", body)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{src}"\n')
        f.write(body)


if __name__ == "__main__":
    main()
