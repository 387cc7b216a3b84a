ALTER TABLE orders DROP COLUMN protection_price;
