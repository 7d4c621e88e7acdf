// Interpreter behaviour on small templates. The expected strings are what Python jinja2 3.1
// renders with transformers' settings (trim_blocks, lstrip_blocks, loopcontrols, its tojson).
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace qwen35::tmpl {
namespace {

using testing_util::out;

const char* const kVars =
    R"~({"xs": [1, 2, 3], "d": {"a": 1, "b": [1, 2]}, "s": "héllo", "f": 2.5, "n": null, "t": true, "e": [], "ws": " \t\n a b \u3000\u001c", "big": 1e20, "small": 1e-05, "nested": [{"name": "a", "v": 3}, {"name": "B", "v": 1}, {"name": "c", "v": 2}]})~";

struct Row {
  const char* name;
  const char* src;
  const char* expected;
};

const Row kRows[] = {
    {"TrimBlocksAndLstripBlocks",
     R"~(a
  {% if true %}
    x
  {% endif %}
b
    {# comment #}
c)~",
     R"~(a
    x
b
c)~"},
    {"DashStripsAllWhitespace",
     R"~(a  {%- if true -%}  b  {%- endif -%}  c {{- 'd' -}} e {{ 'f' }})~", R"~(abcde f)~"},
    {"PlusDisablesLstripAndTrim",
     R"~(  {%+ if true %}x{% endif +%}
y)~",
     R"~(  x
y)~"},
    {"VariablesAreNotLstripped",
     R"~(line
  {{ 'v' }}
  {% if true %}b{% endif %})~",
     R"~(line
  v
b)~"},
    {"CommentsTrimToo",
     R"~({# a #}
{#- b -#}
  {# c #}
d)~",
     R"~(d)~"},
    {"RawBlock", R"~(a {%- raw -%}  {{ x }}  {%- endraw -%} b)~", R"~(a{{ x }}b)~"},
    {"TrailingNewlineDropped",
     R"~(x
)~",
     R"~(x)~"},
    {"CrLfNormalized", "a\r\nb\rc",
     R"~(a
b
c)~"},
    {"LoopVariables",
     R"~({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }};{% endfor %})~",
     R"~(1032TrueFalse3[|2]a;2121FalseFalse3[1|3]b;3210FalseTrue3[2|]a;)~"},
    {"LoopElseAndFilter",
     R"~({% for x in [] %}a{% else %}empty{% endfor %}|{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}{% endfor %})~",
     R"~(empty|1/22/2)~"},
    {"BreakAndContinue",
     R"~({% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %})~",
     R"~(1)~"},
    {"LoopScope",
     R"~({% set x = 1 %}{% for i in xs %}{{ x }}{% set x = i + 10 %}{{ x }},{% endfor %}{{ x }})~",
     R"~(111,112,113,1)~"},
    {"IfScopeLeaks", R"~({% if true %}{% set z = 3 %}{% endif %}{{ z }})~", R"~(3)~"},
    {"Unpacking",
     R"~({% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% set a, b = 1, 2 %}{{ a }}{{ b }})~",
     R"~(a=1;b=[1, 2];12)~"},
    {"Slicing",
     R"~({{ xs[1:] }}{{ xs[:1] }}{{ xs[::2] }}{{ xs[::-1] }}{{ xs[-1] }}{{ s[::-1] }}{{ s[1:-1] }}{{ xs[5:] }}{{ xs[-10:2] }}{{ xs[1::-1] }})~",
     R"~([2, 3][1][1, 3][3, 2, 1]3olléhéll[][1, 2][2, 1])~"},
    {"StrOfValues",
     R"~({{ t }}|{{ n }}|{{ f }}|{{ big }}|{{ small }}|{{ 1.0 }}|{{ 100.0 }}|{{ 0.1 + 0.2 }}|{{ xs }}|{{ d }}|{{ (1,) }}|{{ ["it's", "\n"] }}|{{ u }}|)~",
     R"~(True|None|2.5|1e+20|1e-05|1.0|100.0|0.30000000000000004|[1, 2, 3]|{'a': 1, 'b': [1, 2]}|(1,)|["it's", '\n']||)~"},
    {"StringFilter",
     R"~({{ t|string }}{{ n|string }}{{ f|string }}{{ 3|string }}{{ small|string }})~",
     R"~(TrueNone2.531e-05)~"},
    {"Tojson",
     R"~({{ d|tojson }}|{{ "aé\n\x01<>&'"|tojson }}|{{ 1000.0|tojson }}|{{ xs|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }})~",
     R"~({"a": 1, "b": [1, 2]}|"aé\n\u0001<>&'"|1000.0|[
  1,
  2,
  3
]|{"a": 2, "b": 1}|"\u00e9")~"},
    {"TrimIsPythonStrip",
     R"~([{{ ws|trim }}][{{ ' x '|trim('x ') }}][{{ '\r\n\r\nans'.lstrip('\n') }}][{{ 'ab\n\n'.rstrip('\n') }}][{{ '\nx\n'.strip('\n') }}])~",
     "[a b][][\r\n\r\nans][ab][x]"},
    {"StringMethods",
     R"~({{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ s.upper() }}{{ 'A'.lower() }}{{ 'aXa'.replace('a', 'b') }}{{ '{}-{}'.format(1, 'x') }})~",
     R"~(['a', 'b', '', 'c']['a', 'b']TrueTrueHÉLLOabXb1-x)~"},
    {"DictMethods",
     R"~({{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 3) }}{{ d.keys()|list }}{{ d.values()|list|length }}{{ d.items()|list|first }})~",
     R"~(1None3['a', 'b']2('a', 1))~"},
    {"Filters",
     R"~({{ xs|join(',') }}|{{ xs|first }}{{ xs|last }}|{{ d|list }}|{{ 'abc'|list }}|{{ '3.7'|int }}{{ 'x'|int }}{{ '12'|float }}|{{ u|default('D') }}{{ n|default('D', true) }}|{{ s|length }}|{{ 'ab'|upper }}{{ 'AB'|lower }}|{{ 'aXa'|replace('a', 'b') }})~",
     R"~(1,2,3|13|['a', 'b']|['a', 'b', 'c']|3012.0|DD|5|ABab|bXb)~"},
    {"SelectMap",
     R"~({{ nested|selectattr('v', 'gt', 1)|map(attribute='name')|list }}{{ nested|rejectattr('name', 'equalto', 'a')|list|length }}{{ xs|select('odd')|list }}{{ nested|map(attribute='v')|sum }}{{ nested|sort(attribute='v')|map(attribute='name')|join }})~",
     R"~(['a', 'c']2[1, 3]6Bca)~"},
    {"Tests",
     R"~({{ u is defined }}{{ u is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ d is iterable }}{{ u is iterable }}{{ xs is sequence }}{{ 1 is number }}{{ t is true }}{{ false is false }}{{ 1 is eq 1 }}{{ 3 is odd }}{{ 4 is even }}{{ 2 is in xs }})~",
     R"~(FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue)~"},
    {"Operators",
     R"~({{ 1 + 2 * 3 }}{{ 2 ** 3 ** 2 }}{{ 7 / 2 }}{{ 7 // 2 }}{{ -7 // 2 }}{{ -7 % 3 }}{{ 'a' ~ 1 ~ n ~ t }}{{ 'ab' in 'cabd' }}{{ 'z' not in 'ab' }}{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}{{ true + 1 }}{{ 'ab' * 2 }})~",
     R"~(7643.53-42a1NoneTrueTrueTrueTrueTrue2abab)~"},
    {"AndOrReturnOperands",
     R"~({{ n or 'dflt' }}{{ xs and 'yes' }}{{ e and 'yes' }}{{ not xs }}{{ 'x' if n else 'y' }}[{{ 'x' if n }}])~",
     R"~(dfltyes[]Falsey[])~"},
    {"Macros",
     R"~({% macro m(a, b=2, c=a) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c=9) }}|{{ m() }})~",
     R"~(1-2-1|1-3-1|1-2-9|-2-)~"},
    {"MacroSeesGlobalsAtCallTime",
     R"~({% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}{% set y = 6 %}{{ m() }})~",
     R"~(56)~"},
    {"CallBlock",
     R"~({% macro wrap(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) wrap(1) %}v={{ v }}{% endcall %})~",
     R"~(<v=2>)~"},
    {"Namespace",
     R"~({% set ns = namespace(a=1, items=[]) %}{% for x in xs %}{% set ns.a = ns.a + x %}{% set ns.items = ns.items + [x] %}{% endfor %}{{ ns.a }}{{ ns.items }})~",
     R"~(7[1, 2, 3])~"},
    {"BlockSet",
     R"~({% set v %}  block {{ xs|length }} {% endset %}[{{ v }}]{% set w | trim | upper %}  hi  {% endset %}[{{ w }}])~",
     R"~([  block 3 ][HI])~"},
    {"FilterBlock", R"~({% filter upper %}abc{{ s }}{% endfilter %})~", R"~(ABCHÉLLO)~"},
    {"UnicodeLength", R"~({{ s|length }}{{ s[1] }}{{ 'é😀'|length }})~", R"~(5é2)~"},
    {"MarkupEscapesOnPlus", R"~({{ '<'|safe + '<' }}{{ ('x'|safe) is escaped }})~",
     R"~(<&lt;True)~"},
    {"PrintfFormat",
     R"~({{ '%s-%d' % ('a', 3) }}{{ '%05.1f' % 3.14159 }}{{ '%s %s'|format(1, 2) }})~",
     R"~(a-3003.11 2)~"},
};

class JinjaRowTest : public ::testing::TestWithParam<Row> {};

TEST_P(JinjaRowTest, MatchesPythonJinja) {
  EXPECT_EQ(out(GetParam().src, kVars), GetParam().expected) << GetParam().src;
}

INSTANTIATE_TEST_SUITE_P(Jinja, JinjaRowTest, ::testing::ValuesIn(kRows),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return std::string(info.param.name);
                         });

TEST(Jinja, GenerationBlockIsPassThrough) {
  EXPECT_EQ(out("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(Jinja, UnknownFilterInsideIfFailsOnlyWhenApplied) {
  EXPECT_EQ(out("{% if false %}{{ x|nonexistent }}{% endif %}ok"), "ok");
  EXPECT_EQ(out("{{ 'a' if true else x|nonexistent }}"), "a");
  EXPECT_EQ(out("{% if true %}{{ x|nonexistent }}{% endif %}"),
            "ERROR: [chat_template] line 1: No filter named 'nonexistent'.");
  EXPECT_EQ(out("{% if true %}{% for i in [1] %}{{ i|nonexistent }}{% endfor %}{% endif %}"),
            "ERROR: [chat_template] line 1: No filter named 'nonexistent'.");
}

TEST(Jinja, RaiseExceptionMessageAndLine) {
  EXPECT_EQ(out("a\n{{ raise_exception('boom ' ~ 1) }}"), "ERROR: [chat_template] line 2: boom 1");
}

TEST(Jinja, ItemsOnStringIsTypeError) {
  EXPECT_NE(out("{% for k, v in 'abc'|items %}{% endfor %}")
                .find("Can only get item pairs from a mapping."),
            std::string::npos);
}

TEST(Jinja, UndefinedAttributeOfUndefinedFails) {
  EXPECT_EQ(out("{{ nope.x }}"), "ERROR: [chat_template] line 1: 'nope' is undefined");
  EXPECT_EQ(out("{{ [][0].x }}"), "ERROR: [chat_template] line 1: list object has no element 0");
}

TEST(Jinja, SandboxRefusesMutation) {
  EXPECT_NE(out("{{ messages.append(1) }}").find("unsafe"), std::string::npos);
}

TEST(Jinja, TypeErrors) {
  EXPECT_NE(out("{{ 'a' + 1 }}").find("can only concatenate str (not \"int\") to str"),
            std::string::npos);
  EXPECT_NE(out("{{ 1 < 'a' }}").find("'<' not supported between instances of 'int' and 'str'"),
            std::string::npos);
  EXPECT_NE(out("{{ 1 // 0 }}").find("ZeroDivisionError"), std::string::npos);
}

}  // namespace
}  // namespace qwen35::tmpl
