/** The GitHub web flow as a person does it in a browser, against the stand-in GitHub (github-standin.ts). */
import type { Page } from 'playwright-core';

/**
 * Clicks "Sign in with GitHub" on the gateway at `base`, fills the stand-in's sign-in
 * form with `login`, and returns the gateway path the browser lands on (the chat, or
 * the sign-in page with a message).
 */
export async function signInWithGitHub(page: Page, github: { url: string }, login: string, base: string): Promise<string> {
  await page.goto(`${base}/login`);
  await page.click('text=Sign in with GitHub');
  await page.waitForURL(`${github.url}/**`);
  await page.fill('#login_field', login);
  await page.click('button[name=commit]');
  await page.waitForURL((u) => u.href.startsWith(base) && !u.pathname.startsWith('/auth/'));
  return new URL(page.url()).pathname;
}
