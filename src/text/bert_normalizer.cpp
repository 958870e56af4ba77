// BERT's normalisation, one code point at a time (every step is a per-character map).
#include "text/bert_normalizer.h"

namespace kiln::text::detail {

void normalize(std::string_view utf8, const NormalizerOptions& options, std::u32string& out) {
  std::u32string decoded = unicode::decode_utf8(utf8);
  out.reserve(out.size() + decoded.size());
  std::u32string stripped;
  for (char32_t cp : decoded) {
    unicode::CharClass cls = unicode::char_class(cp);
    if (cls == unicode::CharClass::Removed) continue;
    if (cls == unicode::CharClass::Whitespace) {
      out.push_back(U' ');
      continue;
    }
    if (cp < 0x80) {  // ASCII: no CJK, no accents; lower-casing is A-Z only
      out.push_back(options.lowercase && cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
      continue;
    }
    // The order is tokenizers': CJK spacing on the original character, then strip_accents
    // over the whole text, then lower-casing over the whole text. Each is a per-character
    // map, so applying all three per character gives the same result.
    bool cjk = options.cjk && unicode::is_cjk(cp);
    if (cjk) out.push_back(U' ');
    if (!options.strip_accents && !options.lowercase) {
      out.push_back(cp);
    } else if (!options.strip_accents) {
      unicode::append_lower(cp, out);
    } else {
      stripped.clear();
      unicode::append_stripped(cp, stripped);
      if (options.lowercase) {
        for (char32_t s : stripped) unicode::append_lower(s, out);
      } else {
        out += stripped;
      }
    }
    if (cjk) out.push_back(U' ');
  }
}

}  // namespace kiln::text::detail
