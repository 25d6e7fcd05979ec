/** Media types by file extension, for resource links and binary-file reports. */
const BY_EXTENSION: Record<string, string> = {
  txt: 'text/plain', md: 'text/markdown', csv: 'text/csv', tsv: 'text/tab-separated-values', json: 'application/json',
  jsonl: 'application/jsonl', ndjson: 'application/x-ndjson', yaml: 'application/yaml', yml: 'application/yaml', xml: 'application/xml',
  html: 'text/html', htm: 'text/html', css: 'text/css', js: 'text/javascript', mjs: 'text/javascript', ts: 'text/typescript',
  py: 'text/x-python', sh: 'text/x-shellscript', sql: 'application/sql', log: 'text/plain', toml: 'application/toml', ini: 'text/plain',
  svg: 'image/svg+xml', png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', bmp: 'image/bmp',
  pdf: 'application/pdf', zip: 'application/zip', gz: 'application/gzip', tar: 'application/x-tar', parquet: 'application/vnd.apache.parquet',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet', xls: 'application/vnd.ms-excel',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document', pptx: 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
  pkl: 'application/octet-stream', npy: 'application/octet-stream', sqlite: 'application/vnd.sqlite3', db: 'application/vnd.sqlite3',
  mp3: 'audio/mpeg', wav: 'audio/wav', mp4: 'video/mp4',
};

export function mimeTypeOf(path: string): string {
  const ext = /\.([A-Za-z0-9]+)$/.exec(path)?.[1]?.toLowerCase();
  return (ext && BY_EXTENSION[ext]) || 'application/octet-stream';
}
