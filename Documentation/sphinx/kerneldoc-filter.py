#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Documentation/sphinx/kerneldoc-filter.py - Doxygen's INPUT_FILTER for the
# public headers: rewrites the markup of their kernel-doc comments into the
# Doxygen commands that mean the same, so that Doxygen (which parses the C
# declarations and writes the XML Breathe renders) reads the headers as
# they are written.  It translates markup only; it does not parse C.
#
#   /**                                  /**
#    * name() - summary                   * @brief summary
#    * @arg: text                         * @param arg text
#    * Return: text                       * @return text
#    * struct s - summary                 * @brief summary
#    * @member: text                      *            (moved: see below)
#    */                                   */
#   struct s { int member; };           struct s { int member; /**< text */ };
#
# In running text @name becomes @p name, %CONST and &struct s lose their
# kernel-doc sigils.  Every output line is the input line of the same number,
# so Doxygen's warnings point at the header's real lines.  Usage (Doxygen
# calls it so): kerneldoc-filter.py FILE, output on stdout.
import re
import sys

HEAD = re.compile(r"^(?:(struct|enum|union)\s+)?(\w+)(\(\))?\s+-\s+(.*)$")
PARAM = re.compile(r"^@(\w+|\.\.\.)\s*:\s*(.*)$")
SECTION = re.compile(r"^(Return|Returns|Context|Note|Locking)\s*:\s*(.*)$")
# a comment line's text: the " * " prefix dropped
BODY = re.compile(r"^\s*\*(?: |\t|$)(.*)$")


def inline(text):
    """Kernel-doc's inline sigils in running text, as Doxygen writes them."""
    text = re.sub(r"(?<![\w@])@(\w+)", r"@p \1", text)
    text = re.sub(r"&(struct|enum|union) (\w+)", r"\1 \2", text)
    text = re.sub(r"(?<![\w%])%(\w)", r"\1", text)
    return text


def convert_block(lines):
    """
    Convert one kernel-doc block (its lines, "/**" to "*/").  Returns the new
    lines and, for a struct, enum or union, the member descriptions to place
    after their declarations ({name: text}), else None.
    """
    out = list(lines)
    members = None
    first = None
    for i in range(1, len(lines) - 1):
        m = BODY.match(lines[i])
        if m and m.group(1).strip():
            first = i
            break
    if first is None:
        return out, None
    head = HEAD.match(BODY.match(lines[first]).group(1).strip())
    if not head:
        return out, None  # not kernel-doc: left as it is
    kind = head.group(1)
    out[first] = " * @brief " + inline(head.group(4))
    if kind:
        members = {}
    current = None  # the member whose description continues
    for i in range(first + 1, len(lines) - 1):
        m = BODY.match(lines[i])
        if not m:
            current = None
            continue
        text = m.group(1)
        stripped = text.strip()
        p = PARAM.match(stripped)
        s = SECTION.match(stripped)
        if p:
            if members is not None:
                current = p.group(1)
                members[current] = p.group(2)
                out[i] = " *"
            else:
                current = None
                out[i] = " * @param %s %s" % (p.group(1),
                                              inline(p.group(2)))
        elif s:
            current = None
            if s.group(1).startswith("Return"):
                cmd = "@return"
            else:  # no Doxygen command: a bold lead-in
                cmd = "<b>%s:</b>" % s.group(1)
            out[i] = " * %s %s" % (cmd, inline(s.group(2)))
        elif not stripped:
            current = None
        elif current is not None and members is not None:
            members[current] += " " + stripped
            out[i] = " *"
        else:
            out[i] = " * " + inline(text)
    if members is not None:
        members = {k: inline(v) for k, v in members.items()}
    return out, members


def convert_file_comment(lines):
    """
    The header's opening comment ("/*", " * name.h - summary", ...) becomes
    Doxygen's description of the file (global symbols are documented only
    in a documented file); "Title" over "-----" becomes a bold title.
    """
    for i, line in enumerate(lines):
        if line.strip() == "/*":
            break
        if line.strip() and not line.startswith("/* SPDX"):
            return
    else:
        return
    m = BODY.match(lines[i + 1]) if i + 1 < len(lines) else None
    head = m and re.match(r"^[\w/.-]+\.h\s+-\s+(.*)$", m.group(1).strip())
    if not head:
        return
    lines[i] = "/** @file\n"
    lines[i + 1] = " * @brief %s\n" % inline(head.group(1))
    j = i + 2
    while j < len(lines) and "*/" not in lines[j]:
        m = BODY.match(lines[j])
        under = BODY.match(lines[j + 1]) if j + 1 < len(lines) else None
        if m and under and re.match(r"^(-+|=+)$", under.group(1).strip()):
            lines[j] = " * <b>%s</b>\n" % m.group(1).strip()
            lines[j + 1] = " *\n"
            j += 1
        elif m:
            lines[j] = " * %s\n" % inline(m.group(1))
        j += 1


def place_members(lines, start, members, path):
    """Append each member's description to its declaration after start."""
    depth = 0
    seen = False
    for i in range(start, len(lines)):
        line = lines[i]
        code = line.split("/*")[0]
        for name, text in list(members.items()):
            # "type name;", "name = 1,", "name[4];", "(*name)(args);"
            if depth == 1 and re.search(r"\b%s\s*(?:[;,=\[:)]|$)"
                                        % re.escape(name), code):
                lines[i] = lines[i].rstrip("\n") + " /**< %s */\n" % \
                    text.replace("*/", "* /")
                del members[name]
        depth += code.count("{") - code.count("}")
        seen = seen or "{" in code
        if seen and depth <= 0:
            break
    for name in members:
        sys.stderr.write("%s:%d: warning: documented member '%s' not found\n"
                         % (path, start, name))


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: kerneldoc-filter.py FILE\n")
        return 2
    path = sys.argv[1]
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        sys.stderr.write("kerneldoc-filter: %s: %s\n" % (path, e.strerror))
        return 1
    convert_file_comment(lines)
    i = 0
    while i < len(lines):
        if lines[i].strip() == "/**":
            j = i
            while j < len(lines) and "*/" not in lines[j]:
                j += 1
            if j == len(lines):
                sys.stderr.write("%s:%d: warning: unterminated comment\n"
                                 % (path, i + 1))
                break
            block, members = convert_block(
                [l.rstrip("\n") for l in lines[i:j + 1]])
            lines[i:j + 1] = [l + "\n" for l in block]
            if members:
                place_members(lines, j + 1, members, path)
            i = j + 1
        else:
            i += 1
    sys.stdout.write("".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
