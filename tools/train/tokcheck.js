// Encodes texts with the Hugging Face `tokenizers` library (npm @anush008/tokenizers, the Rust
// crate's binding) for tokcheck.py.  usage: NODE_PATH=DIR/node_modules node tokcheck.js tokenizer.json in.json out.json
const fs = require("fs");
const { Tokenizer } = require("@anush008/tokenizers");
(async () => {
  const [tokPath, inPath, outPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const texts = JSON.parse(fs.readFileSync(inPath, "utf8"));
  const out = [];
  for (const t of texts) {
    const enc = await tok.encode(t, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    const dec = await tok.decode(ids, false);
    out.push({ ids: Array.from(ids), decoded: dec });
  }
  fs.writeFileSync(outPath, JSON.stringify({ vocab: tok.getVocabSize(true), out }));
})().catch((e) => { console.error(e); process.exit(1); });
