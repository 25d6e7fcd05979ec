# The gateway image, for compose.yaml. Sandboxes do not run in it: it drives the host's
# dockerd through the mounted socket, and every sandbox runs there under runsc.
FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends e2fsprogs mount python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm install --omit=dev --no-audit --no-fund && npm cache clean --force
COPY src ./src
COPY host ./host
COPY views ./views
COPY static ./static
COPY skills ./skills
COPY tools ./tools
COPY bin ./bin
ENV NODE_ENV=production
EXPOSE 8787
CMD ["node", "--import", "tsx", "src/main.ts"]
