/** Structured JSON logs (pino). One root logger; modules take a child with `{ module }`. */
import { pino, type Logger, type DestinationStream } from 'pino';

export type { Logger };

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'sandgate' },
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', '*.token', '*.secret'], censor: '[redacted]' },
    },
    destination,
  );
}
