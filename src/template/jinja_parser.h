// Parser: tokens -> syntax tree, following jinja2's grammar and operator precedence.
#pragma once

#include <string_view>

#include "template/jinja_ast.h"

namespace qwen35::tmpl::jinja {

// Throws TemplateError naming the line and the construct.
Body parse_template(std::string_view source);

}  // namespace qwen35::tmpl::jinja
