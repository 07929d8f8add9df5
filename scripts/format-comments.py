#!/usr/bin/python3
# scripts/format-comments.py — the step of scripts/format.sh that clang-format
# cannot do with ReflowComments off: a trailing /* comment that goes on over
# more lines keeps its continuation lines where they were while clang-format
# moved its first line; re-indent them to the text column of the first line.
#
#   scripts/format-comments.py FILE...
import re, sys
for path in sys.argv[1:]:
    lines = open(path).read().split("\n")
    out = []; i = 0; changed = False
    while i < len(lines):
        l = lines[i]; out.append(l)
        # string and character literals blanked, so a "/*" inside one is not a comment
        code = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', lambda q: "_" * len(q.group(0)), l)
        m = re.search(r"\S.*?(/\*)(?!.*\*/)", code)
        if m and not l.lstrip().startswith("/*") and not l.lstrip().startswith("*"):
            col = m.start(1) + 3
            j = i + 1
            while j < len(lines):
                c = lines[j]
                s = c.lstrip()
                new = " " * col + s if s else c
                if new != c:
                    changed = True
                out.append(new)
                if "*/" in c:
                    break
                j += 1
            i = j + 1
            continue
        i += 1
    if changed:
        open(path, "w").write("\n".join(out))
        print("fixed", path)
