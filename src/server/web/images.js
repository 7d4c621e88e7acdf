// Images in the chat page: attached with the button, pasted or dropped; each becomes a data: URL
// the chat API takes as an image_url part. An image past kMaxBytes or kMaxSide is redrawn on a
// canvas (longest side kMaxSide, JPEG), so a phone photo neither fills the browser's storage nor
// the request. Stored conversations keep their images within kStoreBudget characters: when
// more are attached, the oldest images are let go (their messages say so), never the text.

export const ACCEPT = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];
const kMaxBytes = 1536 * 1024;
const kMaxSide = 1536;
export const kStoreBudget = 3 * 1024 * 1024;  // characters of data: URLs in localStorage

function readAsDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error || new Error('the file could not be read'));
    r.readAsDataURL(blob);
  });
}

function loadImage(url) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error('the browser cannot read this image'));
    img.src = url;
  });
}

// A file -> a data: URL the server reads. Rejects with a message for the user.
export async function imageFromFile(file) {
  if (!ACCEPT.includes(file.type)) {
    throw new Error(`${file.name || 'the file'} is not a PNG, JPEG, WebP or GIF image`);
  }
  const url = await readAsDataUrl(file);
  const img = await loadImage(url);  // also refuses what the browser cannot decode
  const side = Math.max(img.naturalWidth, img.naturalHeight);
  if (file.size <= kMaxBytes && side <= kMaxSide) return url;
  const scale = Math.min(1, kMaxSide / side);
  const canvas = document.createElement('canvas');
  canvas.width = Math.max(1, Math.round(img.naturalWidth * scale));
  canvas.height = Math.max(1, Math.round(img.naturalHeight * scale));
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = '#fff';  // transparency on white, as the model's processor does
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
  return canvas.toDataURL('image/jpeg', 0.9);
}

// The image files of a paste or a drop.
export function imageFiles(dataTransfer) {
  if (!dataTransfer) return [];
  const files = [...(dataTransfer.files || [])];
  if (!files.length && dataTransfer.items) {
    for (const it of dataTransfer.items) {
      if (it.kind === 'file') {
        const f = it.getAsFile();
        if (f) files.push(f);
      }
    }
  }
  return files.filter((f) => f.type.startsWith('image/'));
}

export function isImageUrl(x) {
  return typeof x === 'string' && /^data:image\/(png|jpeg|webp|gif);base64,[A-Za-z0-9+/=]+$/.test(x);
}

// Lets go of the oldest images until the conversations' images fit the budget. Returns how
// many were let go.
export function fitImages(conversations, budget = kStoreBudget) {
  const all = [];
  for (const c of conversations) {
    for (const m of c.messages) {
      if (m.role === 'user' && m.images) m.images.forEach((u, i) => all.push({ c, m, i, n: u.length }));
    }
  }
  let total = all.reduce((s, x) => s + x.n, 0);
  all.sort((a, b) => a.c.updated - b.c.updated);
  let dropped = 0;
  for (const x of all) {
    if (total <= budget) break;
    x.m.images[x.i] = null;
    total -= x.n;
    ++dropped;
  }
  for (const c of conversations) {
    for (const m of c.messages) {
      if (m.role !== 'user' || !m.images) continue;
      const kept = m.images.filter(Boolean);
      m.images_dropped = (m.images_dropped || 0) + m.images.length - kept.length;
      m.images = kept;
    }
  }
  return dropped;
}
