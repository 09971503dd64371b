"""Code material for the distillation prompt set (:mod:`dart_core.data.prompts.chat_set`): a library of short, correct
snippets in ten languages (each with one realistic bug for fix-this-bug requests), function-writing tasks,
programming concepts and error messages. Data only."""

from __future__ import annotations

from typing import NamedTuple

from dart_core.data.prompts.words import word_list


class Snippet(NamedTuple):
    """A small, correct program: ``does`` completes "This function ...", ``bug`` is ``(old, new)`` that breaks it."""

    language: str
    name: str
    does: str
    code: str
    bug: tuple[str, str]


LANGUAGES = ["Python", "JavaScript", "TypeScript", "C", "C++", "Java", "Go", "Rust", "SQL", "Bash"]
FENCE = {"Python": "python", "JavaScript": "javascript", "TypeScript": "typescript", "C": "c", "C++": "cpp",
         "Java": "java", "Go": "go", "Rust": "rust", "SQL": "sql", "Bash": "bash"}

SNIPPETS = [
    Snippet("Python", "py-word-count", "counts how often each word appears in a text",
            "def word_counts(text):\n    counts = {}\n    for word in text.lower().split():\n"
            "        word = word.strip(\".,!?;:\")\n        if word:\n"
            "            counts[word] = counts.get(word, 0) + 1\n"
            "    return counts\n", ("counts.get(word, 0) + 1", "1")),
    Snippet("Python", "py-binary-search", "returns the index of a target in a sorted list, or -1",
            "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n"
            "        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n"
            "        if items[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid - 1\n"
            "    return -1\n", ("while lo <= hi:", "while lo < hi:")),
    Snippet("Python", "py-moving-average", "computes the moving average of a list over a window",
            "def moving_average(values, window):\n    if window <= 0:\n"
            "        raise ValueError(\"window must be positive\")\n"
            "    out = []\n    total = 0.0\n    for i, v in enumerate(values):\n        total += v\n"
            "        if i >= window:\n            total -= values[i - window]\n        if i >= window - 1:\n"
            "            out.append(total / window)\n    return out\n", ("if i >= window:", "if i > window:")),
    Snippet("Python", "py-dedupe", "removes duplicates from a list while keeping the first occurrence's order",
            "def dedupe(items):\n    seen = set()\n    result = []\n    for item in items:\n"
            "        if item not in seen:\n"
            "            seen.add(item)\n            result.append(item)\n    return result\n",
            ("            seen.add(item)\n", "")),
    Snippet("Python", "py-csv-total", "reads a CSV file and returns the sum of its 'amount' column",
            "import csv\n\ndef total_amount(path):\n    total = 0.0\n    with open(path, newline=\"\") as f:\n"
            "        for row in csv.DictReader(f):\n            total += float(row[\"amount\"])\n    return total\n",
            ("total += float(row[\"amount\"])", "total = float(row[\"amount\"])")),
    Snippet("Python", "py-class-account", "models a bank account that refuses overdrafts",
            "class Account:\n    def __init__(self, balance=0):\n        self.balance = balance\n\n"
            "    def deposit(self, amount):\n        self.balance += amount\n\n    def withdraw(self, amount):\n"
            "        if amount > self.balance:\n            raise ValueError(\"insufficient funds\")\n"
            "        self.balance -= amount\n", ("if amount > self.balance:", "if amount > self.balance + 100:")),
    Snippet("JavaScript", "js-debounce", "delays calling a function until the calls stop for a given time",
            "function debounce(fn, ms) {\n  let timer;\n  return function (...args) {\n    clearTimeout(timer);\n"
            "    timer = setTimeout(() => fn.apply(this, args), ms);\n  };\n}\n", ("    clearTimeout(timer);\n", "")),
    Snippet("JavaScript", "js-group-by", "groups an array of objects by the value of a key",
            "function groupBy(items, key) {\n  const groups = {};\n  for (const item of items) {\n"
            "    const k = item[key];\n    if (!groups[k]) groups[k] = [];\n    groups[k].push(item);\n  }\n"
            "  return groups;\n}\n", ("if (!groups[k]) groups[k] = [];", "groups[k] = [];")),
    Snippet("JavaScript", "js-fetch-json", "fetches JSON from a URL and throws on HTTP errors",
            "async function getJson(url) {\n  const res = await fetch(url);\n  if (!res.ok) {\n"
            "    throw new Error(`HTTP ${res.status} for ${url}`);\n  }\n  return res.json();\n}\n",
            ("const res = await fetch(url);", "const res = fetch(url);")),
    Snippet("JavaScript", "js-sum-evens", "sums the even numbers of an array",
            "const sumEvens = (nums) =>\n  nums.filter((n) => n % 2 === 0).reduce((acc, n) => acc + n, 0);\n",
            ("(acc, n) => acc + n, 0)", "(acc, n) => acc + n)")),
    Snippet("JavaScript", "js-capitalize", "capitalizes the first letter of every word",
            "function capitalizeWords(s) {\n  return s\n    .split(\" \")\n"
            "    .map((w) => (w ? w[0].toUpperCase() + w.slice(1) : w))\n    .join(\" \");\n}\n",
            ("w.slice(1)", "w.slice(2)")),
    Snippet("TypeScript", "ts-interface", "finds the cheapest in-stock product",
            "interface Product {\n  name: string;\n  price: number;\n  inStock: boolean;\n}\n\n"
            "function cheapest(products: Product[]): Product | undefined {\n  let best: Product | undefined;\n"
            "  for (const p of products) {\n    if (p.inStock && (!best || p.price < best.price)) best = p;\n  }\n"
            "  return best;\n}\n", ("p.price < best.price", "p.price > best.price")),
    Snippet("TypeScript", "ts-clamp", "keeps a number within a minimum and a maximum",
            "function clamp(value: number, min: number, max: number): number {\n"
            "  if (min > max) throw new RangeError(\"min must not exceed max\");\n"
            "  return Math.min(Math.max(value, min), max);\n}\n",
            ("Math.min(Math.max(value, min), max)", "Math.max(Math.min(value, min), max)")),
    Snippet("TypeScript", "ts-result", "parses a port number and returns a result instead of throwing",
            "type Result<T> = { ok: true; value: T } | { ok: false; error: string };\n\n"
            "function parsePort(text: string): Result<number> {\n  const n = Number(text);\n"
            "  if (!Number.isInteger(n) || n < 1 || n > 65535) {\n"
            "    return { ok: false, error: `invalid port: ${text}` };\n  }\n  return { ok: true, value: n };\n}\n",
            ("n > 65535", "n > 6553")),
    Snippet("TypeScript", "ts-counter", "counts events per name in a Map",
            "class Counter {\n  private counts = new Map<string, number>();\n\n  add(name: string): void {\n"
            "    this.counts.set(name, (this.counts.get(name) ?? 0) + 1);\n  }\n\n  get(name: string): number {\n"
            "    return this.counts.get(name) ?? 0;\n  }\n}\n", ("?? 0) + 1", "?? 1) + 1")),
    Snippet("TypeScript", "ts-chunk", "splits an array into chunks of a given size",
            "function chunk<T>(items: T[], size: number): T[][] {\n  const out: T[][] = [];\n"
            "  for (let i = 0; i < items.length; i += size) {\n    out.push(items.slice(i, i + size));\n  }\n"
            "  return out;\n}\n", ("items.slice(i, i + size)", "items.slice(i, size)")),
    Snippet("C", "c-strlen", "returns the length of a C string",
            "#include <stddef.h>\n\nsize_t my_strlen(const char *s) {\n    size_t n = 0;\n"
            "    while (s[n] != '\\0') {\n        n++;\n    }\n    return n;\n}\n", ("size_t n = 0;", "size_t n = 1;")),
    Snippet("C", "c-max", "returns the largest value of an int array",
            "int max_of(const int *a, int n) {\n    int best = a[0];\n    for (int i = 1; i < n; i++) {\n"
            "        if (a[i] > best) {\n            best = a[i];\n        }\n    }\n    return best;\n}\n",
            ("for (int i = 1; i < n; i++)", "for (int i = 1; i <= n; i++)")),
    Snippet("C", "c-reverse", "reverses a string in place",
            "#include <string.h>\n\nvoid reverse(char *s) {\n    size_t i = 0, j = strlen(s);\n"
            "    if (j == 0) return;\n    j--;\n    while (i < j) {\n        char t = s[i];\n        s[i++] = s[j];\n"
            "        s[j--] = t;\n    }\n}\n", ("    j--;\n", "")),
    Snippet("C", "c-linked-list", "pushes a value onto the front of a singly linked list",
            "#include <stdlib.h>\n\nstruct node {\n    int value;\n    struct node *next;\n};\n\n"
            "struct node *push(struct node *head, int value) {\n    struct node *n = malloc(sizeof *n);\n"
            "    if (n == NULL) return head;\n    n->value = value;\n    n->next = head;\n    return n;\n}\n",
            ("n->next = head;", "n->next = NULL;")),
    Snippet("C", "c-count-lines", "counts the lines of a file",
            "#include <stdio.h>\n\nlong count_lines(const char *path) {\n    FILE *f = fopen(path, \"r\");\n"
            "    if (!f) return -1;\n    long lines = 0;\n    int c;\n    while ((c = fgetc(f)) != EOF) {\n"
            "        if (c == '\\n') lines++;\n    }\n    fclose(f);\n    return lines;\n}\n",
            ("    fclose(f);\n", "")),
    Snippet("C++", "cpp-word-freq", "prints how often each word occurs on standard input",
            "#include <iostream>\n#include <map>\n#include <string>\n\nint main() {\n"
            "    std::map<std::string, int> freq;\n    std::string word;\n    while (std::cin >> word) {\n"
            "        ++freq[word];\n    }\n    for (const auto& [w, n] : freq) {\n"
            "        std::cout << w << ' ' << n << '\\n';\n    }\n}\n", ("++freq[word];", "freq[word] = 1;")),
    Snippet("C++", "cpp-stack", "implements a small stack template on top of std::vector",
            "#include <stdexcept>\n#include <vector>\n\ntemplate <typename T>\nclass Stack {\npublic:\n"
            "    void push(const T& v) { data_.push_back(v); }\n    T pop() {\n"
            "        if (data_.empty()) throw std::out_of_range(\"empty stack\");\n        T v = data_.back();\n"
            "        data_.pop_back();\n        return v;\n    }\n    bool empty() const { return data_.empty(); }\n\n"
            "private:\n    std::vector<T> data_;\n};\n", ("T v = data_.back();", "T v = data_.front();")),
    Snippet("C++", "cpp-unique-sorted", "sorts a vector and removes its duplicates",
            "#include <algorithm>\n#include <vector>\n\nstd::vector<int> unique_sorted(std::vector<int> v) {\n"
            "    std::sort(v.begin(), v.end());\n    v.erase(std::unique(v.begin(), v.end()), v.end());\n"
            "    return v;\n}\n", ("    std::sort(v.begin(), v.end());\n", "")),
    Snippet("C++", "cpp-average", "returns the mean of a vector of doubles",
            "#include <numeric>\n#include <vector>\n\ndouble mean(const std::vector<double>& xs) {\n"
            "    if (xs.empty()) return 0.0;\n    return std::accumulate(xs.begin(), xs.end(), 0.0) / xs.size();\n}\n",
            ("xs.end(), 0.0)", "xs.end(), 0)")),
    Snippet("C++", "cpp-rect", "models a rectangle with area and perimeter",
            "struct Rect {\n    double w, h;\n    double area() const { return w * h; }\n"
            "    double perimeter() const { return 2 * (w + h); }\n};\n", ("2 * (w + h)", "2 * w + h")),
    Snippet("Java", "java-palindrome", "checks whether a string is a palindrome, ignoring case",
            "public class Palindrome {\n    public static boolean isPalindrome(String s) {\n"
            "        String t = s.toLowerCase();\n        int i = 0, j = t.length() - 1;\n        while (i < j) {\n"
            "            if (t.charAt(i++) != t.charAt(j--)) return false;\n        }\n"
            "        return true;\n    }\n}\n",
            ("int i = 0, j = t.length() - 1;", "int i = 0, j = t.length();")),
    Snippet("Java", "java-fizzbuzz", "prints FizzBuzz from 1 to 100",
            "public class FizzBuzz {\n    public static void main(String[] args) {\n"
            "        for (int i = 1; i <= 100; i++) {\n            if (i % 15 == 0) System.out.println(\"FizzBuzz\");\n"
            "            else if (i % 3 == 0) System.out.println(\"Fizz\");\n"
            "            else if (i % 5 == 0) System.out.println(\"Buzz\");\n            else System.out.println(i);\n"
            "        }\n    }\n}\n", ("if (i % 15 == 0)", "if (i % 10 == 0)")),
    Snippet("Java", "java-stream", "returns the names of adults sorted alphabetically",
            "import java.util.List;\n\nrecord Person(String name, int age) {}\n\nclass People {\n"
            "    static List<String> adults(List<Person> people) {\n        return people.stream()\n"
            "                .filter(p -> p.age() >= 18)\n                .map(Person::name)\n"
            "                .sorted()\n"
            "                .toList();\n    }\n}\n", ("p.age() >= 18", "p.age() > 18")),
    Snippet("Java", "java-counter", "counts the vowels in a string",
            "public class Vowels {\n    public static int count(String s) {\n        int n = 0;\n"
            "        for (char c : s.toLowerCase().toCharArray()) {\n            if (\"aeiou\".indexOf(c) >= 0) n++;\n"
            "        }\n        return n;\n    }\n}\n", ("indexOf(c) >= 0", "indexOf(c) > 0")),
    Snippet("Java", "java-fib", "returns the n-th Fibonacci number iteratively",
            "public class Fib {\n    public static long fib(int n) {\n        long a = 0, b = 1;\n"
            "        for (int i = 0; i < n; i++) {\n            long t = a + b;\n"
            "            a = b;\n            b = t;\n"
            "        }\n        return a;\n    }\n}\n", ("a = b;\n            b = t;", "b = t;\n            a = b;")),
    Snippet("Go", "go-reverse-words", "reverses the order of the words in a sentence",
            "package main\n\nimport \"strings\"\n\nfunc reverseWords(s string) string {\n"
            "\twords := strings.Fields(s)\n\tfor i, j := 0, len(words)-1; i < j; i, j = i+1, j-1 {\n"
            "\t\twords[i], words[j] = words[j], words[i]\n\t}\n\treturn strings.Join(words, \" \")\n}\n",
            ("i < j;", "i <= len(words)-1;")),
    Snippet("Go", "go-http", "serves a JSON health check over HTTP",
            "package main\n\nimport (\n\t\"encoding/json\"\n\t\"log\"\n\t\"net/http\"\n)\n\n"
            "func health(w http.ResponseWriter, r *http.Request) {\n"
            "\tw.Header().Set(\"Content-Type\", \"application/json\")\n"
            "\tjson.NewEncoder(w).Encode(map[string]string{\"status\": \"ok\"})\n}\n\nfunc main() {\n"
            "\thttp.HandleFunc(\"/health\", health)\n\tlog.Fatal(http.ListenAndServe(\":8080\", nil))\n}\n",
            ("\"/health\", health", "\"/health\", nil")),
    Snippet("Go", "go-sum-channel", "sums numbers concurrently with goroutines and a channel",
            "package main\n\nfunc sum(nums []int, out chan<- int) {\n\ttotal := 0\n\tfor _, n := range nums {\n"
            "\t\ttotal += n\n\t}\n\tout <- total\n}\n\nfunc parallelSum(nums []int) int {\n\tout := make(chan int)\n"
            "\thalf := len(nums) / 2\n\tgo sum(nums[:half], out)\n\tgo sum(nums[half:], out)\n"
            "\treturn <-out + <-out\n}\n",
            ("go sum(nums[half:], out)", "go sum(nums[half+1:], out)")),
    Snippet("Go", "go-max", "returns the largest int of a slice and an error for an empty slice",
            "package main\n\nimport \"errors\"\n\nfunc maxOf(xs []int) (int, error) {\n\tif len(xs) == 0 {\n"
            "\t\treturn 0, errors.New(\"empty slice\")\n\t}\n\tbest := xs[0]\n\tfor _, x := range xs[1:] {\n"
            "\t\tif x > best {\n\t\t\tbest = x\n\t\t}\n\t}\n\treturn best, nil\n}\n", ("if x > best", "if x < best")),
    Snippet("Go", "go-struct", "defines a temperature type with a Fahrenheit conversion",
            "package main\n\nimport \"fmt\"\n\ntype Celsius float64\n\nfunc (c Celsius) Fahrenheit() float64 {\n"
            "\treturn float64(c)*9/5 + 32\n}\n\nfunc main() {\n\tfmt.Println(Celsius(100).Fahrenheit())\n}\n",
            ("*9/5 + 32", "*5/9 + 32")),
    Snippet("Rust", "rs-word-count", "counts word frequencies with a HashMap",
            "use std::collections::HashMap;\n\nfn word_counts(text: &str) -> HashMap<String, usize> {\n"
            "    let mut counts = HashMap::new();\n    for word in text.split_whitespace() {\n"
            "        *counts.entry(word.to_lowercase()).or_insert(0) += 1;\n    }\n    counts\n}\n",
            ("or_insert(0) += 1", "or_insert(1) += 1")),
    Snippet("Rust", "rs-option", "returns the first even number of a slice, if any",
            "fn first_even(nums: &[i32]) -> Option<i32> {\n    nums.iter().copied().find(|n| n % 2 == 0)\n}\n",
            ("n % 2 == 0", "n % 2 == 1")),
    Snippet("Rust", "rs-struct", "defines a 2D point with a distance method",
            "#[derive(Debug, Clone, Copy)]\nstruct Point {\n    x: f64,\n    y: f64,\n}\n\nimpl Point {\n"
            "    fn distance(&self, other: &Point) -> f64 {\n"
            "        ((self.x - other.x).powi(2) + (self.y - other.y).powi(2)).sqrt()\n    }\n}\n",
            ("(self.y - other.y).powi(2)", "(self.y - other.x).powi(2)")),
    Snippet("Rust", "rs-parse", "parses a comma-separated list of integers, reporting bad entries",
            "fn parse_list(s: &str) -> Result<Vec<i64>, std::num::ParseIntError> {\n"
            "    s.split(',').map(|part| part.trim().parse::<i64>()).collect()\n}\n",
            ("part.trim().parse", "part.parse")),
    Snippet("Rust", "rs-fib", "returns the n-th Fibonacci number with checked overflow",
            "fn fib(n: u32) -> Option<u64> {\n    let (mut a, mut b) = (0u64, 1u64);\n    for _ in 0..n {\n"
            "        let next = a.checked_add(b)?;\n        a = b;\n        b = next;\n    }\n    Some(a)\n}\n",
            ("for _ in 0..n", "for _ in 1..n")),
    Snippet("SQL", "sql-top-customers", "lists the five customers who spent the most",
            "SELECT c.name, SUM(o.total) AS spent\nFROM customers c\nJOIN orders o ON o.customer_id = c.id\n"
            "GROUP BY c.id, c.name\nORDER BY spent DESC\nLIMIT 5;\n", ("ORDER BY spent DESC", "ORDER BY spent ASC")),
    Snippet("SQL", "sql-monthly", "counts sign-ups per month in 2024",
            "SELECT strftime('%Y-%m', created_at) AS month, COUNT(*) AS signups\nFROM users\n"
            "WHERE created_at >= '2024-01-01' AND created_at < '2025-01-01'\nGROUP BY month\nORDER BY month;\n",
            ("created_at < '2025-01-01'", "created_at < '2024-12-01'")),
    Snippet("SQL", "sql-no-orders", "finds the products that have never been ordered",
            "SELECT p.id, p.name\nFROM products p\nLEFT JOIN order_items oi ON oi.product_id = p.id\n"
            "WHERE oi.product_id IS NULL;\n", ("LEFT JOIN", "JOIN")),
    Snippet("SQL", "sql-avg-salary", "shows departments whose average salary is above 50000",
            "SELECT department, AVG(salary) AS avg_salary\nFROM employees\nGROUP BY department\n"
            "HAVING AVG(salary) > 50000;\n", ("HAVING AVG(salary) > 50000", "HAVING salary > 50000")),
    Snippet("SQL", "sql-create", "creates a table of books with a unique ISBN",
            "CREATE TABLE books (\n    id INTEGER PRIMARY KEY,\n    title TEXT NOT NULL,\n    author TEXT NOT NULL,\n"
            "    isbn TEXT UNIQUE,\n    published_year INTEGER CHECK (published_year > 1400)\n);\n",
            ("isbn TEXT UNIQUE", "isbn TEXT")),
    Snippet("Bash", "sh-backup", "copies every .txt file into a dated backup folder",
            "#!/usr/bin/env bash\nset -euo pipefail\n\ndest=\"backup-$(date +%Y-%m-%d)\"\nmkdir -p \"$dest\"\n"
            "for f in *.txt; do\n  [ -e \"$f\" ] || continue\n  cp -- \"$f\" \"$dest/\"\ndone\n"
            "echo \"copied to $dest\"\n", ("mkdir -p \"$dest\"", "mkdir \"$dest\"")),
    Snippet("Bash", "sh-count", "prints the ten most common words of a file",
            "#!/usr/bin/env bash\ntr -cs '[:alnum:]' '\\n' < \"$1\" | tr '[:upper:]' '[:lower:]' |\n"
            "  sort | uniq -c | sort -rn | head -n 10\n", ("sort | uniq -c", "uniq -c")),
    Snippet("Bash", "sh-args", "checks its arguments and greets each name",
            "#!/usr/bin/env bash\nif [ \"$#\" -eq 0 ]; then\n  echo \"usage: $0 NAME...\" >&2\n  exit 1\nfi\n"
            "for name in \"$@\"; do\n  echo \"Hello, $name!\"\ndone\n", ("for name in \"$@\"", "for name in $*")),
    Snippet("Bash", "sh-disk", "warns when the root disk is more than 90 percent full",
            "#!/usr/bin/env bash\nusage=$(df --output=pcent / | tail -n 1 | tr -dc '0-9')\n"
            "if [ \"$usage\" -gt 90 ]; then\n  echo \"warning: disk ${usage}% full\"\nfi\n",
            ("-gt 90", "-lt 90")),
    Snippet("Bash", "sh-rename", "renames .jpeg files to .jpg in the current folder",
            "#!/usr/bin/env bash\nfor f in *.jpeg; do\n  [ -e \"$f\" ] || continue\n"
            "  mv -- \"$f\" \"${f%.jpeg}.jpg\"\ndone\n",
            ("\"${f%.jpeg}.jpg\"", "\"${f}.jpg\"")),
]

# Function-writing tasks ("Write a function that ...").
TASKS = word_list("""
reverses a linked list; tells whether a word or phrase reads the same backwards; counts the words in a text file;
finds the largest element in a list; merges two sorted lists; computes the factorial of a number;
returns the n-th Fibonacci number; removes duplicates from a list while keeping order; validates an email address;
converts Celsius to Fahrenheit; sorts a list of records by a key; finds the most common letter in a string;
flattens a nested list; computes the greatest common divisor of two numbers; determines whether a number is prime;
reads a CSV file and sums a column; implements binary search; implements a stack; implements a queue with two stacks;
counts the vowels in a sentence; transposes a matrix; returns the words of a list that are anagrams of a given word;
rotates an array by k positions; parses a date string in YYYY-MM-DD format; creates a random password of a given
length; capitalizes every word in a sentence; finds the second largest number in a list; determines whether two
strings are anagrams; converts a Roman numeral to an integer; converts an integer to a Roman numeral; converts an
integer to binary; computes the running sum of a list; finds the missing number in a range; groups words by their
first letter; implements bubble sort; implements insertion sort; implements merge sort; implements quicksort;
implements a simple LRU cache; finds the longest word in a sentence; determines whether parentheses are balanced;
computes the dot product of two vectors; finds the intersection of two lists; splits a list into chunks of size n;
counts the occurrences of each character in a string; finds the longest common prefix of a list of strings;
determines whether a year is a leap year; computes the median of a list; computes the standard deviation of a list;
generates the first n prime numbers with a sieve; converts a string to title case; removes all whitespace from a
string; finds pairs in a list that add up to a target; implements a binary search tree insert and search;
does a breadth-first search on a graph; does a depth-first search on a graph; finds the shortest path in a grid;
detects a cycle in a linked list; computes the power set of a set; generates all permutations of a string;
computes the edit distance between two strings; finds the longest increasing subsequence; solves the coin change
problem; counts the islands in a grid of 0s and 1s; validates a Sudoku board; formats a number with thousands
separators; converts a duration in seconds to hours, minutes and seconds; parses a URL query string into a dictionary;
masks all but the last four digits of a card number; computes compound interest; converts kilometres to miles;
determines whether a number is a perfect square; sums the digits of a number; reverses the words in a sentence;
compresses a string with run-length encoding; decodes a run-length encoded string; finds the mode of a list;
merges two dictionaries, summing values for shared keys; deep-copies a nested structure; retries a function call
three times with a delay; reads a JSON file and prints one field; writes a list of records to a CSV file;
counts the lines, words and characters of a file; finds the k most frequent words in a text;
determines whether a string contains only digits; converts snake_case to camelCase; converts camelCase to snake_case;
computes the area of a polygon from its vertices; generates Pascal's triangle; implements a min-heap;
implements a trie for word lookup; determines whether a binary tree is balanced; finds the lowest common ancestor in
a tree; throttles a function so it runs at most once per second; validates a password's strength; shuffles a list
fairly; computes the Levenshtein distance; finds duplicate files by their hash; paginates a list of items;
calculates the day of the week for a date; computes the number of days between two dates
""")
TASK_LANGUAGES = ["Python", "JavaScript", "TypeScript", "C", "C++", "Java", "Go", "Rust"]

# Programming concepts to explain (topic, language it belongs to or "" for language-neutral).
CONCEPTS = [(c.split("|")[0].strip(), c.split("|")[1].strip()) for c in word_list("""
list comprehensions|Python; generators and yield|Python; decorators|Python; context managers|Python; the GIL|Python;
virtual environments|Python; type hints|Python; dataclasses|Python; *args and **kwargs|Python; mutable default
arguments|Python; closures|JavaScript; promises|JavaScript; async and await|JavaScript; the event loop|JavaScript;
this binding|JavaScript; let, const and var|JavaScript; prototypes|JavaScript; generic types|TypeScript; union
types|TypeScript; interfaces versus type aliases|TypeScript; strict null checks|TypeScript; pointers|C; malloc and
free|C; undefined behaviour|C; header files|C; buffer overflows|C; RAII|C++; smart pointers|C++; move semantics|C++;
templates|C++; virtual functions|C++; references versus pointers|C++; interfaces|Java; garbage collection|Java;
checked exceptions|Java; the JVM|Java; streams|Java; goroutines|Go; channels|Go; interfaces|Go; error handling|Go;
defer|Go; ownership and borrowing|Rust; lifetimes|Rust; traits|Rust; the Option type|Rust; pattern matching|Rust;
JOINs|SQL; indexes|SQL; GROUP BY and HAVING|SQL; transactions|SQL; normalisation|SQL; window functions|SQL; pipes and
redirection|Bash; exit codes|Bash; quoting variables|Bash; environment variables|Bash; recursion|; Big O notation|;
hash tables|; immutability|; dependency injection|; unit tests versus integration tests|; regular expressions|; REST
APIs|; race conditions|; memoization|; dynamic programming|; object-oriented programming|; functional programming|;
static versus dynamic typing|; stack versus heap memory|; floating-point rounding errors|; Unicode and UTF-8|;
caching|; code review|
""")]

ERRORS = [(e.split("|")[0].strip(), e.split("|")[1].strip()) for e in word_list("""
TypeError: 'NoneType' object is not subscriptable|Python; IndexError: list index out of range|Python; KeyError:
'name'|Python; ModuleNotFoundError: No module named 'requests'|Python; UnboundLocalError: local variable 'total'
referenced before assignment|Python; RecursionError: maximum recursion depth exceeded|Python; TypeError: Cannot read
properties of undefined|JavaScript; ReferenceError: x is not defined|JavaScript; Uncaught SyntaxError: Unexpected
token '<' in JSON|JavaScript; error TS2322: Type 'string' is not assignable to type 'number'|TypeScript; error TS2532:
Object is possibly 'undefined'|TypeScript; Segmentation fault (core dumped)|C; warning: implicit declaration of
function 'printf'|C; undefined reference to `main'|C++; error: use of deleted function|C++; NullPointerException|Java;
ConcurrentModificationException|Java; error: cannot find symbol|Java; fatal error: all goroutines are asleep -
deadlock!|Go; declared and not used|Go; error[E0382]: borrow of moved value|Rust; error[E0502]: cannot borrow as
mutable because it is also borrowed as immutable|Rust; ERROR: column "name" must appear in the GROUP BY clause|SQL;
ERROR: duplicate key value violates unique constraint|SQL; bash: ./deploy.sh: Permission denied|Bash; unbound
variable|Bash
""")]

# SQL requests over a small schema (the schema is given in the prompt).
SQL_SCHEMA = ("customers(id, name, city, joined_on), orders(id, customer_id, total, ordered_on), "
              "order_items(order_id, product_id, quantity), products(id, name, category, price)")
SQL_TASKS = word_list("""
returns the total revenue per month; lists customers who have never placed an order; finds the three best-selling
products by quantity; shows the average order value per city; lists the orders placed in the last 30 days; finds
customers who ordered more than five times; returns each category's most expensive product; counts new customers per
year; finds orders whose total is above the average order total; lists products that were never ordered; shows each
customer's first and latest order date; computes the running total of revenue by day; finds the city with the most
customers; lists customers and their total spend, highest first; returns the share of revenue that each category
brings
""")
