#!/usr/bin/env node
// The `sandgate` operator command: runs src/cli/main.ts through tsx (no build step).
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
