//! Splitting a line into its keyword and arguments as OpenSSH's `argv_split` does: `=`
//! after the keyword, quotes, backslash escapes, `#` comments.

/// Splits a line into its keyword and arguments like OpenSSH's `argv_split`; `None` for a
/// blank or comment line.
pub(super) fn split_line(line: &str) -> std::result::Result<Option<(String, Vec<String>)>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let end = line
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(line.len());
    let (keyword, rest) = line.split_at(end);
    let rest = rest.trim_start();
    // `Keyword=value`, `Keyword = value`: one `=` may separate keyword and value.
    let rest = rest.strip_prefix('=').unwrap_or(rest);
    Ok(Some((keyword.to_owned(), split_args(rest)?)))
}

fn split_args(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None | Some('#') => break,
            Some(_) => args.push(next_arg(&mut chars)?),
        }
    }
    Ok(args)
}

fn next_arg(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
) -> std::result::Result<String, String> {
    let mut arg = String::new();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => break,
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (_, '\\') => match chars
                .next_if(|&n| matches!(n, '"' | '\'' | '\\') || (quote.is_none() && n == ' '))
            {
                Some(escaped) => arg.push(escaped),
                None => arg.push('\\'),
            },
            (_, c) => arg.push(c),
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".to_owned());
    }
    Ok(arg)
}
