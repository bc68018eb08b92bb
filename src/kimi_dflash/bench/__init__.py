"""The benchmark and its reports, on aiohttp + numpy + pydantic + the standard library only (a client box);
matplotlib only for compare's plots. The instruments that check it live in ``kimi_dflash_lab``."""
