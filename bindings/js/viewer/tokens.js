// Token ids back to text in the page, from a Hugging Face `tokenizer.json`: the vocabulary
// inverted, then the decoder's rule for joining pieces (byte-level BPE as GPT-2 and Llama 3
// write it, WordPiece's "##", SentencePiece's "▁" and its <0xNN> byte pieces). A preview
// for reading what a tokenizer made of a document; an id outside the vocabulary shows as
// ⟨id⟩.

/** GPT-2's map from each byte to the printable character byte-level BPE writes for it. */
function byteLevelChars() {
  const bytes = [];
  for (let b = 33; b <= 126; b += 1) bytes.push(b);
  for (let b = 161; b <= 172; b += 1) bytes.push(b);
  for (let b = 174; b <= 255; b += 1) bytes.push(b);
  const chars = bytes.map((b) => b);
  let n = 0;
  for (let b = 0; b < 256; b += 1) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n);
      n += 1;
    }
  }
  const toByte = new Map();
  bytes.forEach((b, k) => toByte.set(String.fromCodePoint(chars[k]), b));
  return toByte;
}

function usesByteLevel(t) {
  const kinds = [t.decoder, t.pre_tokenizer, ...(t.decoder?.decoders ?? []), ...(t.pre_tokenizer?.pretokenizers ?? [])];
  return kinds.some((k) => k?.type === 'ByteLevel');
}

/** A function from a list of ids to text, for the tokenizer `t` (parsed tokenizer.json). */
export function decoderFor(t) {
  const pieces = new Map();
  const vocab = t.model?.vocab ?? {};
  if (Array.isArray(vocab)) vocab.forEach(([piece], id) => pieces.set(id, piece));
  else for (const [piece, id] of Object.entries(vocab)) pieces.set(id, piece);
  for (const added of t.added_tokens ?? []) pieces.set(added.id, added.content);
  const special = new Set((t.added_tokens ?? []).filter((a) => a.special).map((a) => a.id));
  const byteLevel = usesByteLevel(t);
  const toByte = byteLevel ? byteLevelChars() : null;
  const wordPiece = t.model?.type === 'WordPiece' ? (t.model.continuing_subword_prefix ?? '##') : null;
  const utf8 = new TextDecoder();

  return (ids) => {
    if (byteLevel) {
      const out = [];
      for (const id of ids) {
        const piece = pieces.get(id);
        if (piece === undefined) out.push(...new TextEncoder().encode(`⟨${id}⟩`));
        else if (special.has(id)) out.push(...new TextEncoder().encode(piece));
        else for (const ch of piece) out.push(toByte.get(ch) ?? 63);
      }
      return utf8.decode(new Uint8Array(out));
    }
    const parts = [];
    let bytes = [];
    const flush = () => {
      if (bytes.length) parts.push(utf8.decode(new Uint8Array(bytes)));
      bytes = [];
    };
    ids.forEach((id, k) => {
      const piece = pieces.get(id);
      const hex = piece && /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
      if (hex) {
        bytes.push(parseInt(hex[1], 16));
        return;
      }
      flush();
      if (piece === undefined) parts.push(`⟨${id}⟩`);
      else if (wordPiece && !special.has(id)) {
        parts.push(piece.startsWith(wordPiece) ? piece.slice(wordPiece.length) : `${k ? ' ' : ''}${piece}`);
      } else parts.push(piece.replaceAll('▁', ' '));
    });
    flush();
    return parts.join('');
  };
}
